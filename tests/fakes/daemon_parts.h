// DaemonParts: the objects a Dispatcher works with (what daemon.cc assembles), over a MemStore and
// with no GPU lanes, for tests that drive request handling without sockets or processes.
#pragma once

#include <memory>

#include "daemon/dispatcher.h"
#include "daemon/jobs/queue.h"
#include "store/mem_store.h"

namespace ktune::testing {

struct DaemonParts {
  DaemonParts(DaemonConfig config_in, const TemplateRegistry& templates_in, NodeIdentity node_in)
      : config(std::move(config_in)),
        templates(templates_in),
        node(std::move(node_in)),
        catalog(store, index, templates, node),
        pins(store, index, node),
        misses(size_t(config.miss_tracker_bytes)),
        lookups(config, templates, catalog, pins, node, metrics, misses),
        jobs(store, config.max_queued_jobs),
        ctx{config, store, templates, catalog, node, metrics, misses, lookups, pins, jobs, nullptr},
        dispatcher(ctx, nullptr) {
    (void)check_store_format(store, false);
  }

  DaemonConfig config;
  MemStore store;
  const TemplateRegistry& templates;
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
