#include "store/table_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "store/record_json.h"
#include "store/yaml_writer.h"

namespace ktune {
namespace {

using detail::Json;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
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

std::string render_csv(const std::vector<WinnerRecord>& winners) {
  std::string out =
      "device,op,dtype,out_dtype,layout,dims,rank,template,template_hash,params,median_us,"
      "spread_pct,tflops,gbps,driver,nvrtc,node_id,timestamp,strategy,trials\n";
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
                                            number(c.median_us),
                                            number(c.spread_pct),
                                            number(c.tflops),
                                            number(c.gbps),
                                            w.validators.driver,
                                            w.validators.nvrtc,
                                            w.node_id,
                                            std::to_string(w.timestamp),
                                            w.strategy,
                                            std::to_string(w.trials)};
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

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

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

Result<void> write_file_atomic(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail(ErrorCode::io_error, tmp + ": cannot create: " + std::strerror(errno));
    out.write(content.data(), std::streamsize(content.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return fail(ErrorCode::io_error, tmp + ": write failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return fail(ErrorCode::io_error, path + ": cannot rename into place: " + ec.message());
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
                                              std::vector<ImportRejection>& rejected) {
  const std::string where(origin);
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return fail(ErrorCode::invalid_argument,
                where + ": not a JSON table (truncated or damaged?): " + e.what());
  }
  if (!doc.is_object() || !doc.contains("ktune_table"))
    return fail(ErrorCode::invalid_argument,
                where + ": not a ktune table: the top-level object has no \"ktune_table\"");
  if (!doc["ktune_table"].is_number_integer() ||
      doc["ktune_table"].get<int>() != k_table_format_version)
    return fail(ErrorCode::format_mismatch, where + ": table format " + doc["ktune_table"].dump() +
                                                ", this ktune reads " +
                                                std::to_string(k_table_format_version));
  if (!doc.contains("winners") || !doc["winners"].is_array())
    return fail(ErrorCode::invalid_argument, where + ": \"winners\" must be an array");
  const Json& list = doc["winners"];
  if (doc.contains("count") &&
      (!doc["count"].is_number_unsigned() || doc["count"].get<size_t>() != list.size()))
    return fail(ErrorCode::invalid_argument, where + ": header says " + doc["count"].dump() +
                                                 " records, the file holds " +
                                                 std::to_string(list.size()) + " (truncated?)");
  std::vector<WinnerRecord> out;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "winners[" + std::to_string(i) + "]";
    try {
      WinnerRecord r = detail::winner_from_json(list[i], path);
      const std::string key = r.key();
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

bool prefer_incoming(const WinnerRecord& stored, const WinnerRecord& incoming) {
  const double a = stored.ranked.front().median_us, b = incoming.ranked.front().median_us;
  if (a != b) return b < a;
  if (stored.timestamp != incoming.timestamp) return incoming.timestamp > stored.timestamp;
  if (stored.node_id != incoming.node_id) return incoming.node_id > stored.node_id;
  return encode(incoming) > encode(stored);
}

Result<ImportReport> import_table(Store& store, std::string_view text, std::string_view origin) {
  ImportReport report;
  auto records = parse_table(text, origin, report.rejected);
  if (!records) return std::unexpected(records.error());
  report.total = records->size() + report.rejected.size();
  if (!report.rejected.empty()) return report;  // all or nothing

  WriteBatch batch;
  for (auto& r : *records) {
    auto stored = get_winner(store, r.device, r.problem);
    if (!stored) return std::unexpected(stored.error());
    if (!*stored) {
      ++report.added;
    } else if (**stored != r && prefer_incoming(**stored, r)) {
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
