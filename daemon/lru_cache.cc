#include "daemon/lru_cache.h"

#include <xxhash.h>

#include <unordered_map>

namespace ktune {

#if defined(__GLIBCXX__)
static_assert(std::__cache_default<std::string_view, KeyHash>::value,
              "the answer caches' index must keep each node's hash (see KeyHash)");
#endif

std::size_t KeyHash::operator()(std::string_view key) const {
  return std::size_t(XXH3_64bits(key.data(), key.size()));
}

}  // namespace ktune
