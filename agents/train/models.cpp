#include "models.h"

#include "linear.h"

namespace trainscope::train {

std::unique_ptr<Model> makeMlp(Compute& c, const Options& o) {
  return std::make_unique<Model>(makeMlpLayers(c, o), o.seed);
}

std::vector<std::unique_ptr<Layer>> makeLayers(Compute& c, const Options& o) {
  return o.model == "transformer" ? makeTransformerLayers(c, o) : makeMlpLayers(c, o);
}

int rowsPerSample(const Options& o) {
  return o.model == "transformer" ? o.seqLen : 1;
}

std::vector<std::unique_ptr<Layer>> makeMlpLayers(Compute& c, const Options& o) {
  std::vector<std::unique_ptr<Layer>> layers;
  int in = o.inputDim;
  for (int i = 0; i < o.layers; ++i) {
    layers.push_back(std::make_unique<Linear>(c, in, o.width, true));
    in = o.width;
  }
  layers.push_back(std::make_unique<Linear>(c, in, o.classes, false));
  return layers;
}

}  // namespace trainscope::train
