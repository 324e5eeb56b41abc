// Every op, for model code: `#include "ops/ops.h"`.
#pragma once

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/reduction.h"
#include "ops/rotary.h"
#include "ops/softmax.h"
#include "ops/view_ops.h"
