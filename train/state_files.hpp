#pragma once
// Training-state files (FILE.state, FILE.rank<r>-of-<N>.state): TrainingState and its reader and
// writer, and ShardedTrainingState, which reads any rank count's files piece by piece.
#include "models/llmc_files.hpp"
#include "models/sharded_state.hpp"
#include "models/state_layout.hpp"
