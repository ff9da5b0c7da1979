#include "models.h"

#include "linear.h"

namespace trainscope::train {

std::unique_ptr<Model> makeMlp(Compute& c, const Options& o) {
  std::vector<std::unique_ptr<Layer>> layers;
  int in = o.inputDim;
  for (int i = 0; i < o.layers; ++i) {
    layers.push_back(std::make_unique<Linear>(c, in, o.width, true));
    in = o.width;
  }
  layers.push_back(std::make_unique<Linear>(c, in, o.classes, false));
  return std::make_unique<Model>(std::move(layers), o.seed);
}

}  // namespace trainscope::train
