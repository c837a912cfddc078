#include "store/table_io.h"

#include "config/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "store/record_json.h"
#include "store/table_readers.h"
#include "store/yaml_writer.h"

namespace ktune {
namespace {

using detail::Json;

std::string utc_now() {
  return utc_iso8601(std::time(nullptr));
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

// The CSV cell of a record's timing: empty when it does not say.
std::string timing_cell(TimingL2 t) {
  return t == TimingL2::unknown ? std::string() : std::string(to_string(t));
}

// One row per ranked config; every field of the record, numbers exact, so the CSV imports back
// to the same winners (store/table_readers.h).
std::string render_csv(const std::vector<WinnerRecord>& winners) {
  std::string out;
  for (auto name : detail::k_csv_columns) out += (out.empty() ? "" : ",") + std::string(name);
  out += "\n";
  using detail::exact_number;
  for (const auto& w : winners) {
    std::string dims;
    for (const auto& [n, v] : w.problem.dims)
      dims += (dims.empty() ? "" : ",") + n + "=" + std::to_string(v);
    for (size_t i = 0; i < w.ranked.size(); ++i) {
      const auto& c = w.ranked[i];
      const std::vector<std::string> row = {w.device.id(),
                                            w.problem.op,
                                            w.problem.dtype,
                                            w.problem.out_dtype,
                                            w.problem.layout,
                                            dims,
                                            std::to_string(i + 1),
                                            c.template_name,
                                            c.template_hash,
                                            params_to_string(c.params),
                                            exact_number(c.median_us),
                                            exact_number(c.spread_pct),
                                            exact_number(c.tflops),
                                            exact_number(c.gbps),
                                            w.validators.driver,
                                            w.validators.nvrtc,
                                            w.node_id,
                                            std::to_string(w.timestamp),
                                            w.strategy,
                                            std::to_string(w.trials),
                                            w.device.name,
                                            exact_number(w.ref_error),
                                            std::to_string(w.sm_clock_mhz),
                                            std::to_string(w.mem_clock_mhz),
                                            exact_number(w.power_w),
                                            std::to_string(w.validators.store_format),
                                            timing_cell(w.timing_l2),
                                            std::to_string(w.sm_clock_counted_mhz)};
      static_assert(detail::k_csv_columns.size() == 28, "a row has one field per column");
      for (size_t k = 0; k < row.size(); ++k) out += (k ? "," : "") + csv_field(row[k]);
      out += "\n";
    }
  }
  return out;
}

// Appends every record, as `write` renders one, reserving the document's size up front (from the
// first record) so the text is never copied while it grows.
template <typename Write>
void append_records(std::string& out, const std::vector<WinnerRecord>& winners, Write write) {
  for (size_t i = 0; i < winners.size(); ++i) {
    const size_t before = out.size();
    write(out, detail::to_json(winners[i]), i + 1 == winners.size());
    if (i == 0) out.reserve(out.size() + (out.size() - before) * (winners.size() - 1) * 11 / 10);
  }
}

// The JSON document exactly as nlohmann's dump(2) prints it, written record by record: the
// table is never one tree in memory, only each record in turn.
std::string render_json(const std::vector<WinnerRecord>& winners) {
  std::string out = "{\n  \"ktune_table\": " + std::to_string(k_table_format_version) +
                    ",\n  \"exported_at\": \"" + utc_now() +
                    "\",\n  \"count\": " + std::to_string(winners.size()) + ",\n  \"winners\": ";
  if (winners.empty()) return out += "[]\n}\n";
  out += "[\n";
  append_records(out, winners, [](std::string& o, const Json& record, bool last) {
    o += "    ";
    for (char c : record.dump(2)) {  // strings in JSON hold no raw newline
      o += c;
      if (c == '\n') o += "    ";
    }
    o += last ? "\n" : ",\n";
  });
  out += "  ]\n}\n";
  return out;
}

// The same document in YAML, block style (store/yaml_writer.h), record by record.
std::string render_yaml(const std::vector<WinnerRecord>& winners) {
  std::string out = "ktune_table: " + std::to_string(k_table_format_version) + "\nexported_at: ";
  detail::append_yaml_string(out, utc_now());
  out += "\ncount: " + std::to_string(winners.size()) + "\nwinners:";
  if (winners.empty()) return out += " []\n";
  out += "\n";
  append_records(out, winners, [](std::string& o, const Json& record, bool) {
    detail::append_yaml_item(o, record, 2);
  });
  return out;
}

// Whether arrays and objects nest deeper than `limit` (strings skipped). The same rule as
// protocol::detail::nests_deeper_than; the store cannot depend on the client's protocol header.
bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Finds the byte offset where a JSON text stops parsing: nlohmann's number-overflow error (406)
// carries no position, so one SAX pass that keeps nothing reports it.
class ErrorLocator final : public nlohmann::json_sax<Json> {
 public:
  size_t offset = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception&) override {
    offset = position;
    return false;
  }
};

// "origin:LINE:COLUMN" for the byte where `text` stops parsing (1-based, as editors count, and as
// nlohmann's message counts: one past the last byte for a text that ends too early).
std::string error_position(std::string_view text, const std::string& origin) {
  ErrorLocator locator;
  (void)Json::sax_parse(text, &locator);
  // The parser reports how many bytes it read, the failing one included.
  const size_t failed = locator.offset == 0 ? 0 : locator.offset - 1;
  const size_t before = std::min(failed, text.size());
  const size_t line = 1 + size_t(std::count(text.begin(), text.begin() + long(before), '\n'));
  const size_t newline = before == 0 ? std::string_view::npos : text.rfind('\n', before - 1);
  const size_t column = (newline == std::string_view::npos ? failed : failed - newline - 1) + 1;
  return origin + ":" + std::to_string(line) + ":" + std::to_string(column);
}

// Parses a table document in any format; every way the text can fail is an Error naming
// file:line[:column].
Result<Json> parse_document(std::string_view text, const std::string& origin) {
  switch (detect_table_format(text)) {
    case TableFormat::yaml:
      return detail::yaml_table_to_json(text, origin);
    case TableFormat::csv:
      return detail::csv_table_to_json(text, origin);
    case TableFormat::json:
      break;
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return fail(ErrorCode::invalid_argument, origin + ": empty: no table in it");
  if (nests_deeper_than(text, k_max_table_depth))
    return fail(ErrorCode::invalid_argument,
                origin + ": not a ktune table: arrays and objects nest deeper than " +
                    std::to_string(k_max_table_depth));
  try {
    return Json::parse(text);
  } catch (const Json::out_of_range& e) {  // 406: a number beyond a double (1e400)
    return fail(ErrorCode::invalid_argument,
                error_position(text, origin) + ": number out of range: " + e.what());
  } catch (const Json::exception& e) {  // syntax, invalid UTF-8, a truncated file
    return fail(
        ErrorCode::invalid_argument,
        error_position(text, origin) + ": not a JSON table (truncated or damaged?): " + e.what());
  }
}

// A header field's value for an error message: numbers as written, anything else by type (a
// damaged header could hold a huge string or array).
std::string shown(const Json& j) {
  return j.is_number() ? j.dump() : std::string("a ") + j.type_name();
}

constexpr std::string_view k_device_name_chars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._-";
constexpr std::string_view k_template_name_chars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
constexpr std::int64_t k_max_timestamp = 4'102'444'800;  // 2100-01-01T00:00:00Z

bool is_identifier(const std::string& s) {
  const auto alpha = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  return !s.empty() && s.size() <= 64 && alpha(s.front()) &&
         std::all_of(s.begin(), s.end(),
                     [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

bool is_short_printable(const std::string& s) {
  return s.size() <= 128 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

// A client's text for an error message: at most 64 bytes, non-printable bytes as '?'.
std::string printable(const std::string& s) {
  std::string out = s.substr(0, 64);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s.size() > 64 ? out + "..." : out;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TableFormat detect_table_format(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return TableFormat::json;  // empty: JSON's error says so
  const std::string_view rest = text.substr(first);
  if (rest.front() == '{' || rest.front() == '[') return TableFormat::json;
  if (rest.starts_with("device,")) return TableFormat::csv;
  return TableFormat::yaml;
}

Result<TableFormat> parse_table_format(std::string_view name) {
  if (name == "json") return TableFormat::json;
  if (name == "yaml" || name == "yml") return TableFormat::yaml;
  if (name == "csv") return TableFormat::csv;
  return fail(ErrorCode::invalid_argument,
              "unknown table format '" + std::string(name) + "' (json, yaml, csv)");
}

std::string render_table(const std::vector<WinnerRecord>& winners, TableFormat format) {
  switch (format) {
    case TableFormat::json:
      return render_json(winners);
    case TableFormat::yaml:
      return render_yaml(winners);
    case TableFormat::csv:
      return render_csv(winners);
  }
  return "";
}

namespace {

// Writes into an existing file that is not a regular one (/dev/null, /dev/stdout, a FIFO) in
// place: replacing it by a rename would put a regular file where the device was.
Result<void> write_in_place(const std::string& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::io_error, path + ": cannot open: " + std::strerror(errno));
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return fail(ErrorCode::io_error, path + ": write failed: " + std::strerror(err));
    }
    done += size_t(n);
  }
  if (::close(fd) != 0)
    return fail(ErrorCode::io_error, path + ": write failed: " + std::strerror(errno));
  return {};
}

}  // namespace

Result<void> write_file_atomic(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target(path);
  // A link is followed: the file it names is replaced, and the link stays a link.
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    target = fs::weakly_canonical(target, ec);
    if (ec) return fail(ErrorCode::io_error, path + ": cannot follow the link: " + ec.message());
  }
  const fs::file_status status = fs::status(target, ec);
  if (fs::is_directory(status)) return fail(ErrorCode::io_error, path + ": is a directory");
  if (fs::exists(status) && !fs::is_regular_file(status))
    return write_in_place(target.string(), content);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail(ErrorCode::io_error, tmp + ": cannot create: " + std::strerror(errno));
    out.write(content.data(), std::streamsize(content.size()));
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      return fail(ErrorCode::io_error, tmp + ": write failed");
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return fail(ErrorCode::io_error, path + ": cannot rename into place: " + why);
  }
  return {};
}

Result<size_t> export_table(Store& store, const std::string& path, TableFormat format,
                            const std::string& device_id) {
  auto winners = scan_winners(store, device_id);
  if (!winners) return std::unexpected(winners.error());
  if (auto ok = write_file_atomic(path, render_table(*winners, format)); !ok)
    return std::unexpected(ok.error());
  return winners->size();
}

Result<std::vector<WinnerRecord>> parse_table(std::string_view text, std::string_view origin,
                                              std::vector<ImportRejection>& rejected,
                                              const RecordCheck& check) {
  const std::string where(origin);
  auto parsed = parse_document(text, where);
  if (!parsed) return std::unexpected(parsed.error());
  const Json& doc = *parsed;
  if (!doc.is_object() || !doc.contains("ktune_table"))
    return fail(ErrorCode::invalid_argument,
                where + ": not a ktune table: the top-level object has no \"ktune_table\"");
  if (!doc["ktune_table"].is_number_integer() ||
      doc["ktune_table"].get<std::int64_t>() != k_table_format_version)
    return fail(ErrorCode::format_mismatch, where + ": table format " + shown(doc["ktune_table"]) +
                                                ", this ktune reads " +
                                                std::to_string(k_table_format_version));
  if (!doc.contains("winners") || !doc["winners"].is_array())
    return fail(ErrorCode::invalid_argument, where + ": \"winners\" must be an array");
  const Json& list = doc["winners"];
  if (doc.contains("count") &&
      (!doc["count"].is_number_unsigned() || doc["count"].get<size_t>() != list.size()))
    return fail(ErrorCode::invalid_argument, where + ": header says " + shown(doc["count"]) +
                                                 " records, the file holds " +
                                                 std::to_string(list.size()) + " (truncated?)");
  std::vector<WinnerRecord> out;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "winners[" + std::to_string(i) + "]";
    try {
      WinnerRecord r = detail::winner_from_json(list[i], path);
      const std::string key = r.key();
      auto valid = validate_imported_winner(r);
      if (valid && check) valid = check(r);
      if (!valid) {
        rejected.push_back({i, key, path + ": " + valid.error().message});
        continue;
      }
      if (auto it = seen.find(key); it != seen.end()) {
        rejected.push_back(
            {i, key, path + ": same key as winners[" + std::to_string(it->second) + "]"});
        continue;
      }
      seen.emplace(key, i);
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      rejected.push_back({i, "", e.what()});
    }
  }
  return out;
}

Result<void> validate_imported_winner(const WinnerRecord& r) {
  auto bad = [](const std::string& what) { return fail(ErrorCode::invalid_argument, what); };
  const DeviceClass& d = r.device;
  if (d.name.empty() || d.name.size() > 64 ||
      d.name.find_first_not_of(k_device_name_chars) != std::string::npos)
    return bad("device.name: '" + printable(d.name) +
               "' must be 1..64 characters of letters, digits, space, '.', '_', '-'");
  if (auto id = parse_device_class_id(d.id()); !id || id->id() != d.id())
    return bad("device: its class id '" + d.id() + "' does not read back");
  if (d.sm_count < 1 || d.sm_count > 10'000) return bad("device.sm_count: must be 1..10000");
  if (d.memory_gib < 0 || d.memory_gib > 65'536) return bad("device.memory_gib: must be 0..65536");
  for (const auto& [field, text] : {std::pair{"validators.driver", &r.validators.driver},
                                    {"validators.nvrtc", &r.validators.nvrtc},
                                    {"node_id", &r.node_id},
                                    {"strategy", &r.strategy}})
    if (!is_short_printable(*text))
      return bad(std::string(field) + ": must be printable ASCII, at most 128 bytes");
  if (r.ranked.size() > k_max_ranked)
    return bad("ranked: at most " + std::to_string(k_max_ranked) + " configs");
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const RankedConfig& c = r.ranked[i];
    const std::string at = "ranked[" + std::to_string(i) + "]";
    if (c.template_name.size() > 64 ||
        c.template_name.find_first_not_of(k_template_name_chars) != std::string::npos)
      return bad(at + ".template: '" + printable(c.template_name) + "' is not a template name");
    if (c.params.size() > 64) return bad(at + ".params: at most 64");
    // Param names are template arguments of CUDA source: C identifiers. Anything else is no
    // template's and would not survive a CSV export (found by fuzz_table's round trip).
    for (const auto& [name, _] : c.params)
      if (!is_identifier(name))
        return bad(at + ".params: '" + printable(name) +
                   "' is not a parameter name (a C identifier)");
    if (!(c.median_us >= k_min_median_us && c.median_us <= k_max_median_us))
      return bad(at + ".median_us: " + number(c.median_us) + " is outside [" +
                 number(k_min_median_us) + ", " + number(k_max_median_us) + "] us");
  }
  if (r.ref_error < 0 || r.power_w < 0 || r.sm_clock_mhz < 0 || r.mem_clock_mhz < 0 ||
      r.sm_clock_counted_mhz < 0 || r.trials < 0)
    return bad("ref_error, power_w, clocks and trials must be >= 0");
  if (r.timestamp < 0 || r.timestamp > k_max_timestamp)
    return bad("timestamp: " + std::to_string(r.timestamp) +
               " is not in Unix seconds from 0 (1970) to 4102444800 (2100-01-01)");
  return {};
}

std::string ImportReport::rejection_summary(size_t max_reasons) const {
  std::string msg = std::to_string(rejected.size()) + " of " + std::to_string(total) +
                    " records rejected; nothing imported:";
  for (size_t i = 0; i < rejected.size() && i < max_reasons; ++i)
    msg += "\n  " + rejected[i].reason;
  if (rejected.size() > max_reasons)
    msg += "\n  ... and " + std::to_string(rejected.size() - max_reasons) + " more";
  return msg;
}

namespace {
// Medians are compared only between records timed the same way. Across timings a record timed
// with the L2 flushed (the default, and how triton's do_bench times) is preferred, then one timed
// rotated, then one that does not say: each class outranks the next whatever its medians.
int timing_class(TimingL2 t) {
  switch (t) {
    case TimingL2::flushed:
      return 2;
    case TimingL2::rotated:
      return 1;
    case TimingL2::unknown:
      return 0;
  }
  return 0;
}
}  // namespace

bool prefer_incoming(const WinnerRecord& stored, const WinnerRecord& incoming) {
  const int ta = timing_class(stored.timing_l2), tb = timing_class(incoming.timing_l2);
  if (ta != tb) return tb > ta;
  const double a = stored.ranked.front().median_us, b = incoming.ranked.front().median_us;
  if (a != b) return b < a;
  if (stored.timestamp != incoming.timestamp) return incoming.timestamp > stored.timestamp;
  if (stored.node_id != incoming.node_id) return incoming.node_id > stored.node_id;
  return encode(incoming) > encode(stored);
}

Result<ImportReport> import_table(Store& store, std::string_view text, std::string_view origin,
                                  const RecordCheck& check, const ReplaceRule& replace) {
  ImportReport report;
  auto records = parse_table(text, origin, report.rejected, check);
  if (!records) return std::unexpected(records.error());
  report.total = records->size() + report.rejected.size();
  if (!report.rejected.empty()) return report;  // all or nothing

  WriteBatch batch;
  for (auto& r : *records) {
    auto stored = get_winner(store, r.device, r.problem);
    if (!stored) return std::unexpected(stored.error());
    if (!*stored) {
      ++report.added;
    } else if (**stored != r && (replace ? replace(**stored, r) : prefer_incoming(**stored, r))) {
      ++report.replaced;
    } else {
      ++report.kept;
      continue;
    }
    batch.put(Table::winners, r.key(), encode(r));
    report.written.push_back(std::move(r));
  }
  if (!batch.empty())
    if (auto ok = store.write(batch, Durability::sync); !ok) return std::unexpected(ok.error());
  return report;
}

Result<ImportReport> import_table_file(Store& store, const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  return import_table(store, *text, path);
}

}  // namespace ktune
