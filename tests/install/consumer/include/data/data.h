// The consumer's own data/data.h (see core/error.h beside it).
#pragma once

namespace consumer {
inline int batch_size() { return 4; }
}  // namespace consumer
