// Every op, for model code: `#include "ops/ops.h"`.
#pragma once

#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/reduction.h"
#include "ops/view_ops.h"
