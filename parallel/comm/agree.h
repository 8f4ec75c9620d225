// parallel/comm/agree.h — ranks that must be started alike check that they were, before any work.
//
// Ranks started separately (mpirun's MPMD form, a host with another data folder) can disagree on
// a setting: a different batch size puts their collectives out of step, a different learning
// rate trains each rank to other parameters with every rank exiting 0. check_ranks_agree
// all-gathers every rank's settings (name and value, as text) and, when any differs, throws the
// same error on every rank, naming the first setting that differs and each rank's value.
//
// The settings travel as JSON text through all_gather_text (parallel/comm/communicator.h), which every
// rank can join whatever its settings.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

using Settings = std::vector<std::pair<std::string, std::string>>;  // (name, value), in a fixed order

// Throws on every rank, e.g. "the ranks disagree on --batch-size: rank 0 has 64, rank 1 has 32",
// when a setting's value (or its presence) differs between ranks; returns on every rank otherwise.
void check_ranks_agree(Communicator& comm, const Settings& settings);

}  // namespace mg::parallel
