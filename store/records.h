// The records kept in each Store table, their keys, and their encoding.
//
// Every value starts with one byte, the record encoding version (k_record_encoding), followed by
// compact JSON (cubins: JSON header, then the raw cubin). docs/store-format.md is the spec; enum
// values written to disk are never renumbered. The whole store carries a format version in the
// meta table (k_store_format_version); a mismatch refuses to open.
//
// Free functions over a Store&; thread-safe as the Store is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/problem.h"
#include "store/store.h"

namespace ktune {

inline constexpr int k_store_format_version = 1;
inline constexpr std::uint8_t k_record_encoding = 1;

// The toolchain a measurement was taken under. An entry whose validators differ from the node's
// is served as "stale", never as "exact".
struct Validators {
  std::string driver;  // driver version, e.g. "580.159.03" (NVML) or "cuda-13000" (driver API)
  std::string nvrtc;   // NVRTC version, e.g. "13.0"
  int store_format = k_store_format_version;
  friend bool operator==(const Validators&, const Validators&) = default;
};

// How the L2 cache stood between the timed launches of a measurement (docs/tuning.md, "L2 between
// timed launches"). Medians taken the two ways are not comparable: the merge rule never ranks one
// against the other. Persisted by name ("flushed", "rotated"; unknown: the field is absent, as in
// records written before 2026-12-05). Do not renumber.
enum class TimingL2 : std::uint8_t {
  unknown = 0,
  flushed = 1,  // L2 full of other, dirty lines before each timed launch (as triton's do_bench)
  rotated = 2,  // launches back to back, inputs rotated over sets spanning 3x L2
};
std::string_view to_string(TimingL2 timing);
Result<TimingL2> parse_timing_l2(std::string_view text);  // "flushed" or "rotated"

// One tuned config of a winner record, with what it measured.
struct RankedConfig {
  std::string template_name;
  std::string template_hash;  // the template's kernel hash (templates/registry.h), 16 hex digits
  Params params;
  double median_us = 0;   // median kernel time
  double spread_pct = 0;  // (p90 - p10) / median * 100 over the timed runs
  double tflops = 0;      // achieved, for compute-bound ops (0 if not meaningful)
  double gbps = 0;        // achieved, for memory-bound ops (0 if not meaningful)
  friend bool operator==(const RankedConfig&, const RankedConfig&) = default;
};

// The best configs for one problem on one device class, best first, with full provenance.
struct WinnerRecord {
  DeviceClass device;
  Problem problem;
  Validators validators;
  std::vector<RankedConfig> ranked;  // never empty in a valid record
  double ref_error = 0;              // ||out - ref|| / ||ref|| of ranked[0]
  int sm_clock_mhz = 0;              // clocks and power while timing (0 = NVML absent)
  int mem_clock_mhz = 0;
  double power_w = 0;
  int sm_clock_counted_mhz = 0;  // counted in-kernel after the winner's timing (0 = not counted)
  std::string node_id;         // host that measured it
  std::int64_t timestamp = 0;  // unix seconds
  int trials = 0;              // configs measured by the job
  std::string strategy;        // strategy that found it
  TimingL2 timing_l2 = TimingL2::unknown;  // how every median of `ranked` was timed

  // Store key: "<device id>/<problem key>".
  std::string key() const;
  friend bool operator==(const WinnerRecord&, const WinnerRecord&) = default;
};

// Outcome of one trial. Persisted: do not renumber.
enum class Outcome : std::uint8_t {
  ok = 0,
  invalid = 1,  // cannot run this problem: a constraint fails once the occupancy is known, or the
                // driver refuses its tensor map
  compile_error = 2,
  resource_error = 3,  // launch refused (shared memory, registers, threads); worker keeps going
  wrong_result = 4,
  crash = 5,      // sticky CUDA error: worker replaced, config blocklisted
  timeout = 6,    // worker killed after the deadline
  in_flight = 7,  // recorded before launch; still set after a crash means it was to blame
};
std::string_view to_string(Outcome outcome);

// A trial's reference error as JSON can hold it: one that is not finite (the outputs were NaN,
// infinite or never written: +inf in memory; NaN and -inf likewise) becomes the largest double,
// which every reader takes as a number (JSON has no infinity, and null would fail older readers'
// decode). The store, the worker protocol and ktune-bench write it so (store format 1, revision
// 2026-12-07 (2)); ref_error_from_storable reads the largest double back as +inf.
double storable_ref_error(double error);
double ref_error_from_storable(double stored);
Result<Outcome> parse_outcome(std::string_view text);

// One measured (or failed) config.
struct TrialRecord {
  DeviceClass device;
  Problem problem;
  std::string template_name;
  std::string template_hash;
  Params params;
  Outcome outcome = Outcome::in_flight;
  double median_us = 0;
  double spread_pct = 0;
  double ref_error = 0;
  int registers = 0;
  int spill_bytes = 0;
  int smem_bytes = 0;
  double compile_ms = 0;
  std::string message;  // compile log excerpt, CUDA error, ...
  std::int64_t timestamp = 0;
  std::string job_id;
  // The GPU right after this config was timed (0 = not sampled: no NVML, or not timed). Under a
  // power cap the SM clock a config runs at is part of its speed (bench/NOTES.md, 2026-12-04).
  int sm_clock_mhz = 0;
  double power_w = 0;
  // The SM clock counted in-kernel right after the timing (0 = not counted: older records, no
  // GPU): NVML's sm_clock_mhz can lag a timing shorter than ~0.1 s (bench/NOTES.md, 2026-12-05).
  int sm_clock_counted_mhz = 0;
  TimingL2 timing_l2 = TimingL2::unknown;  // how median_us was timed (unknown: not timed, or old)
  // NVML's memory clock while timed (0 = not sampled, or a record older than 2026-12-07): a
  // winner reused from this trial by a resumed job reports it as its own.
  int mem_clock_mhz = 0;

  // "<device id>/<problem key>/<template>/<params>": the latest result per config.
  std::string key() const;
  // Whether the record can be believed: an `ok` trial has a finite median_us > 0 (a peer or an
  // old writer can hand over anything; the report and the tuner's reuse divide by it).
  bool plausible() const;
  friend bool operator==(const TrialRecord&, const TrialRecord&) = default;
};

// Tuning job state. Persisted: do not renumber.
enum class JobState : std::uint8_t { queued = 0, running = 1, done = 2, failed = 3, cancelled = 4 };
std::string_view to_string(JobState state);
Result<JobState> parse_job_state(std::string_view text);

struct JobRecord {
  std::string id;  // zero-padded sequence number, so keys sort in creation order
  DeviceClass device;
  Problem problem;
  std::string strategy;
  int budget_trials = 0;
  double budget_seconds = 0;
  JobState state = JobState::queued;
  double priority = 0;  // expected GPU time saved; larger first
  std::string origin;   // "request" (a client asked), "miss" (lookups missed), "plan" (operator)
  std::int64_t created = 0;
  std::int64_t updated = 0;
  int trials_done = 0;
  double best_us = 0;
  std::string message;
  // Optional on disk (absent in records written before they existed):
  std::string best;           // "template {params}" of the best config so far
  int reused = 0;             // trials taken from an earlier, interrupted run of this job
  std::int64_t started = 0;   // unix seconds the job last started running (0 = never)
  std::int64_t finished = 0;  // unix seconds it reached done/failed/cancelled (0 = not yet)
  int lane = -1;              // GPU ordinal of the lane running it (-1 = none)
  std::vector<std::string> templates;  // tune only these templates (empty: every one for the op)
  std::vector<Params> seeds;           // configs measured first where a searched space holds them

  std::string key() const { return id; }
  friend bool operator==(const JobRecord&, const JobRecord&) = default;
};

// A config that crashed or hung a worker; never tried again for this template hash, arch, driver.
struct BlockEntry {
  std::string template_hash;
  std::string arch;
  std::string driver;
  Params params;
  Outcome outcome = Outcome::crash;
  std::string message;
  std::int64_t timestamp = 0;

  std::string key() const;  // "<hash>/<arch>/<driver>/<params>"
  friend bool operator==(const BlockEntry&, const BlockEntry&) = default;
};

// A compiled kernel in the cubin cache.
struct CubinEntry {
  std::string lowered_name;  // mangled kernel symbol to load
  int registers = 0;
  int spill_stores = 0;  // bytes
  int spill_loads = 0;   // bytes
  int smem_bytes = 0;    // static shared memory
  int stack_bytes = 0;
  double compile_ms = 0;
  std::string cubin;  // the ELF image
  friend bool operator==(const CubinEntry&, const CubinEntry&) = default;
};

// --- encoding (records.cc); decode_* fail with ErrorCode::corruption on bad bytes ---
std::string encode(const WinnerRecord& r);
std::string encode(const TrialRecord& r);
std::string encode(const JobRecord& r);
std::string encode(const BlockEntry& r);
std::string encode(const CubinEntry& r);
Result<WinnerRecord> decode_winner(std::string_view bytes);
Result<TrialRecord> decode_trial(std::string_view bytes);
Result<JobRecord> decode_job(std::string_view bytes);
Result<BlockEntry> decode_block(std::string_view bytes);
Result<CubinEntry> decode_cubin(std::string_view bytes);

// Whether `bytes` decode as a record of `table` (meta values are free text: always). The error
// (ErrorCode::corruption) is the decoder's.
Result<void> check_record(Table table, std::string_view bytes);

// Checks a winner record's content (what import and the tuner enforce before writing).
Result<void> validate_winner(const WinnerRecord& r);

// --- typed access ---
// Winners and jobs are written with Durability::sync; trials and cubins buffered.
Result<void> put_winner(Store& store, const WinnerRecord& r);
Result<std::optional<WinnerRecord>> get_winner(Store& store, const DeviceClass& device,
                                               const Problem& problem);
// Records a scan passed over because they did not decode (a reader that shows what it can).
struct Skipped {
  size_t count = 0;
  std::string first;  // the first one's key and reason
};

// Every winner (optionally only one device class's), in key order. A record that fails to
// decode is an error naming its key, or with `skipped`, counted there and left out.
Result<std::vector<WinnerRecord>> scan_winners(Store& store, const std::string& device_id = "",
                                               Skipped* skipped = nullptr);

// A tuning job writes each trial with one buffered put as soon as it is known (in flight before
// launch, then its outcome); add_trial is for writers of many records at once.
void add_trial(WriteBatch& batch, const TrialRecord& r);
Result<std::vector<TrialRecord>> scan_trials(Store& store, const std::string& prefix = "",
                                             Skipped* skipped = nullptr);

Result<void> put_job(Store& store, const JobRecord& r);
Result<std::optional<JobRecord>> get_job(Store& store, const std::string& id);
Result<std::vector<JobRecord>> scan_jobs(Store& store);

Result<void> put_block(Store& store, const BlockEntry& r);
Result<bool> is_blocked(Store& store, const BlockEntry& probe);
Result<std::vector<BlockEntry>> scan_blocklist(Store& store);

Result<void> put_cubin(Store& store, const std::string& cache_key, const CubinEntry& r);
Result<std::optional<CubinEntry>> get_cubin(Store& store, const std::string& cache_key);

// Writes the format version into a new store, or checks it in an existing one
// (ErrorCode::format_mismatch naming both versions). Called by RocksDbStore::open.
Result<void> check_store_format(Store& store, bool existing);

}  // namespace ktune
