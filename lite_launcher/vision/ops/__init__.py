"""Image and detection ops: preprocessing, augmentation, anchors, boxes, NMS (TFM's
official/vision/ops/)."""
