// DaemonParts: the objects a Dispatcher works with (what daemon.cc assembles), over a memory
// store whose writes a test can make fail (FlakyStore) and with no GPU lanes, for tests that drive
// request handling without sockets or processes.
#pragma once

#include <memory>

#include "config/config.h"
#include "daemon/dispatcher.h"
#include "daemon/jobs/queue.h"
#include "templates/registry.h"
#include "tests/fakes/flaky_store.h"

namespace ktune::testing {

// The built-in templates, loaded once per test binary.
inline const TemplateRegistry& builtin_templates() {
  static const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  return templates;
}

struct DaemonParts {
  DaemonParts(DaemonConfig config_in, const TemplateRegistry& templates_in, NodeIdentity node_in)
      : config(std::move(config_in)),
        templates(templates_in),
        // Borrowed, not owned (an empty owner): the test's registry outlives the parts. A test
        // that reloads hands catalog.replace_templates a registry of its own.
        template_set(TemplateSet::Snapshot(std::shared_ptr<void>(), &templates_in)),
        node(std::move(node_in)),
        catalog(store, index, template_set, node),
        pins(store, index, node),
        misses(size_t(config.miss_tracker_bytes),
               std::chrono::milliseconds(std::int64_t(config.miss_retry_seconds * 1000))),
        lookups(config, template_set, catalog, pins, node, metrics, misses),
        jobs(store, config.max_queued_jobs),
        ctx{config, store,   template_set, catalog, node,   metrics,
            misses, lookups, pins,         jobs,    nullptr},
        dispatcher(ctx, nullptr) {
    (void)check_store_format(store, false);
  }

  DaemonConfig config;
  FlakyStore store;
  const TemplateRegistry& templates;
  TemplateSet template_set;  // starts as `templates`
  NodeIdentity node;
  WinnerIndex index;
  Catalog catalog;
  PinTable pins;
  Metrics metrics;
  MissTracker misses;
  LookupService lookups;
  JobQueue jobs;
  OpContext ctx;
  Dispatcher dispatcher;
};

}  // namespace ktune::testing
