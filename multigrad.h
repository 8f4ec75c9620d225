// multigrad.h — the public API in one include.
#pragma once

#include "autograd/factory.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/random.h"
#include "core/shape.h"
#include "core/stream.h"
#include "core/tensor.h"
