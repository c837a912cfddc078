// FlakyStore: a MemStore whose writes fail while `failing` is set (a full disk), for tests of
// what the daemon does when its store refuses a write. Reads always work. Thread-safe.
#pragma once

#include <atomic>

#include "store/mem_store.h"

namespace ktune::testing {

class FlakyStore final : public Store {
 public:
  std::atomic<bool> failing{false};

  Result<std::optional<std::string>> get(Table table, std::string_view key) override {
    return m_store.get(table, key);
  }
  Result<void> put(Table table, std::string_view key, std::string_view value,
                   Durability durability) override {
    if (failing) return fail(ErrorCode::io_error, "no space left on device");
    return m_store.put(table, key, value, durability);
  }
  Result<void> remove(Table table, std::string_view key, Durability durability) override {
    if (failing) return fail(ErrorCode::io_error, "no space left on device");
    return m_store.remove(table, key, durability);
  }
  Result<void> scan(Table table, std::string_view prefix, const ScanFn& fn) override {
    return m_store.scan(table, prefix, fn);
  }
  Result<void> write(const WriteBatch& batch, Durability durability) override {
    if (failing) return fail(ErrorCode::io_error, "no space left on device");
    return m_store.write(batch, durability);
  }
  std::string describe() const override { return "flaky memory"; }

 private:
  MemStore m_store;
};

}  // namespace ktune::testing
