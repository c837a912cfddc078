#include "daemon/lru_cache.h"

#include <xxhash.h>

namespace ktune {

std::size_t KeyHash::operator()(std::string_view key) const noexcept {
  return std::size_t(XXH3_64bits(key.data(), key.size()));
}

}  // namespace ktune
