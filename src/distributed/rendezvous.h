// The rendezvous of a multi-process run's ranks on the c10d store (after checking that the store
// is this job's), before the process group's backend opens (group.cpp's Group::connect calls it).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "world/world.h"

namespace dlrun::dist {

/// The rendezvous, in two rounds on the store, so that a stop request (SIGTERM, a notice) that
/// arrives meanwhile ends every rank's start-up with exit 75 instead of leaving some waiting:
///
/// 1. Arrival: every rank writes "arrived/<rank>" (its host and pid) and waits for the others'
///    keys until the deadline (those missing then are named: dlrun::Error, exit 1). A rank asked
///    to stop meanwhile writes "stop/<rank>" and leaves (StoppedDuringRendezvous).
/// 2. Agreement: every rank that got through writes "go/<rank>" — or "stop/<rank>" if a stop
///    request came in the meantime — once, and proceeds to open the backend only when every
///    rank wrote "go". One "stop" makes every rank leave: none is left waiting in the backend's
///    own connection set-up, which cannot be interrupted. A stop request after a rank's "go" is
///    seen by the start-up checks that follow (every rank together).
///
/// A store that stops answering while this rank has a stop request of its own (rank 0, which
/// hosts it, left for the same reason) also counts as a stop.
void await_ranks(c10d::Store& store, const World& w, double timeout_s);

/// Make sure the store at MASTER_ADDR:MASTER_PORT is this job's before writing into it. With
/// the port held by another job, rank 0 fails to host, and the other ranks would otherwise join
/// that job's rendezvous and its collectives. `host`: this rank hosts the store (rank 0, no
/// torchrun agent) and claims it; the others compare.
void check_job(c10d::Store& tcp, const World& w, bool host, double timeout_s);

}  // namespace dlrun::dist
