// Model builders for the trainer's tasks.
#pragma once

#include <memory>

#include "model.h"
#include "options.h"

namespace trainscope::train {

// input -> [width, ReLU] x layers -> classes.
std::unique_ptr<Model> makeMlp(Compute& c, const Options& o);
// tokens -> embedding (+ positions) -> [attention block, MLP block] x layers -> LN -> vocab.
std::unique_ptr<Model> makeTransformer(Compute& c, const Options& o);

// The layers of o.model's chain (unbound: no parameters yet), so a pipeline stage can build a
// Model from a subset of them. Every interior activation has o.width columns.
std::vector<std::unique_ptr<Layer>> makeLayers(Compute& c, const Options& o);
std::vector<std::unique_ptr<Layer>> makeMlpLayers(Compute& c, const Options& o);
std::vector<std::unique_ptr<Layer>> makeTransformerLayers(Compute& c, const Options& o);
// Rows of an activation per sample (the transformer has one row per token).
int rowsPerSample(const Options& o);

}  // namespace trainscope::train
