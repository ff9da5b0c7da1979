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

}  // namespace trainscope::train
