/*
 * head.h — sequence-classification head on top of the final hidden states, and its losses: the
 * kernels (pooling, linear head, weighted CE, BCE-with-logits) are in kernels/train_ops.h (one op
 * of every backend table); this header gives training code their internal pooling names.
 */
#ifndef AF_HEAD_H
#define AF_HEAD_H

#include "afinar.h"
#include "kernels/train_ops.h"

/* The pooling of the public API (af_head_pooling, include/afinar.h) under its internal names. */
typedef af_head_pooling af_pooling;
#define AF_POOL_MEAN AF_POOLING_MEAN
#define AF_POOL_LAST AF_POOLING_LAST

#endif /* AF_HEAD_H */
