// JSON forms of the store records, shared by the value encoding (records.cc) and the export
// format (export.cc). Internal to ktune_store; other libraries use store/records.h.
//
// from_json_* throw JsonFieldError (caught inside ktune_store and turned into an Error) naming
// the JSON path of the bad field, e.g. "winners[3].ranked[0].median_us: expected a number".
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "store/records.h"

namespace ktune::detail {

using Json = nlohmann::ordered_json;

struct JsonFieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Json to_json(const DeviceClass& d);
Json to_json(const Problem& p);
Json to_json(const Params& p);
Json to_json(const WinnerRecord& r);
Json to_json(const TrialRecord& r);
Json to_json(const JobRecord& r);
Json to_json(const BlockEntry& r);

DeviceClass device_from_json(const Json& j, const std::string& path);
Problem problem_from_json(const Json& j, const std::string& path);
Params params_from_json(const Json& j, const std::string& path);
WinnerRecord winner_from_json(const Json& j, const std::string& path);
TrialRecord trial_from_json(const Json& j, const std::string& path);
JobRecord job_from_json(const Json& j, const std::string& path);
BlockEntry block_from_json(const Json& j, const std::string& path);

}  // namespace ktune::detail
