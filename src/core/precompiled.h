// The headers most of the engine's translation units include, compiled once per target as a
// precompiled header (CMakeLists.txt, HEADROOM_PCH). Only standard headers and core/ headers
// that change rarely: a change here rebuilds everything. No source includes this file.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
