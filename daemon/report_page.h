// The `/report` page of the HTTP (metrics) listener: the HTML tuning report (report/report.h)
// of this daemon — its winners and the trials in its store, status, misses and jobs, the same
// replies the status, misses and jobs ops give.
//
// Thread-safety: as the ops it reads through (callable from any thread). It scans the store's
// winners and trials, so it takes milliseconds on a large store.
#pragma once

#include <string>

#include "daemon/ops/ops.h"

namespace ktune {

std::string render_report_page(OpContext& ctx);

}  // namespace ktune
