// The DISCO distributed-inference benchmark (`--mode disco --disco-bench FILE`, docs/TRAINER.md):
// the trade-off table of background.md section 1 for our task. Trains the dense split model
// (--steps), then for each level of --bench-sparsities in turn prunes every split layer to it
// and fine-tunes --finetune-steps steps (the seed's iterative procedure: each level prunes the
// previous level's fine-tuned model further), and measures, over the held-out set:
//   bytes      feature bytes all ranks send per inference (only the surviving features);
//   latency    ms per inference of --bench-batch samples, end to end (common start, slowest
//              rank), median of --bench-reps passes, in pipelined and in wait mode;
//   accuracy   held-out accuracy of the distributed model.
// Then the comparison of the seed: independent branches, sparsity 1 trained from scratch for
// the same total number of steps. Rank 0 writes the CSV and prints the table.
#pragma once

#include "backend.h"
#include "options.h"

namespace trainscope::train {

// Collective (every rank); 0 on success, 1 when the table cannot be written.
int runDiscoBench(Backend& backend, const Options& o);

}  // namespace trainscope::train
