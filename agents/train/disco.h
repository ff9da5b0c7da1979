// DISCO (--mode disco; background.md section 1): a feature-split (tensor-parallel) MLP over N
// ranks. Every rank sees the whole batch. Layer 0 (input -> width): rank i computes its O/N
// outputs from the (replicated) input. Hidden layers 1..L-1 (width -> width) are the split
// layers: rank i holds input features I_i and computes outputs O_i; it needs the other ranks'
// features, but only those whose sub-row W[O_i, f] survived pruning: only they are sent
// (isend/irecv; nothing for pruned ones; gradients flow back the same way). The output layer
// is replicated after an allgather of the last hidden features (dense).
//
// Pruning: per split layer, every off-diagonal sub-row (f of rank j, read by rank i) is scored
// by the L1 norm of W[O_i, f]; the lowest fraction `sparsity` of them are pruned (weights and
// momentum zeroed, never updated again while pruned). Every rank computes the same mask (the
// norms are shared with one allreduce). Applied at start and whenever disco.sparsity[.<l>]
// is set (prune to the new level at the step boundary, then training goes on: fine-tuning).
//
// Knobs, all in [0, 1]: disco.sparsity.<l> is split layer l's sparsity; setting disco.sparsity
// sets every split layer's (the job writes the per-layer knobs with ts_knob_restore; a per-layer
// change agreed at the same step wins for its layer). So the per-layer knobs always list what
// runs, and a recording that starts mid-job reads each layer's sparsity from its knob.
#pragma once

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "options.h"
#include "trainer.h"
#include "trainscope/agent.h"

namespace trainscope::train {

struct DiscoKnobs {
  ts_knob_t sparsity = nullptr, mode = nullptr;
  std::vector<ts_knob_t> perLayer;  // disco.sparsity.<l> for split layers 1..L-1 (index l-1)
};
// Registered in disco mode only.
DiscoKnobs registerDiscoKnobs(const Options& o);

struct DiscoSelf {  // base-from-member: a one-rank communicator (no gradient averaging)
  explicit DiscoSelf(Backend& be) : self(be.world->split(be.world->rank(), 0)) {}
  std::unique_ptr<Communicator> self;
};

class DiscoTrainer final : private DiscoSelf, public Trainer {
 public:
  DiscoTrainer(Backend& backend, const Options& o, const DiscoKnobs* knobs);
  bool writeParams(const std::string& path) override;  // collective: the dense model's layout
  uint64_t bytesLastStep() const { return bytes_; }

  // For the inference benchmark (disco_bench.cpp). Collective: every rank calls them.
  void pruneAll(double sparsity);  // every split layer to this sparsity (from the current mask)
  struct Inference {
    uint64_t bytes = 0;  // features this rank sent
    int correct = 0;
  };
  // A forward pass (no training) of x with the sparse exchange in the given mode.
  Inference infer(const Mat& x, const std::vector<int>& labels, bool pipelined);
  const Batch& heldOut() const { return heldOut_; }
  // Step numbers (trace, counters) start at first while the data start at sample 0: a second
  // model trained after a first one in the same trace sees the same samples.
  void numberStepsFrom(int64_t first) { stepBase_ = first; }
  // Kept off-diagonal sub-rows over all split layers and rank pairs (the same on every rank).
  uint64_t keptSubRows() const;

 protected:
  void atStepBoundary(int64_t s) override;
  double step(int64_t s) override;
  double evaluate() override;
  void calibrateCompute() override {}  // calibrate() times the split layers per sparsity

 private:
  double forwardBackward(const Mat& x, const std::vector<int>& labels, bool train, int* correct);
  void prune(int layer, double sparsity);
  std::vector<std::tuple<float, int, int>> ranked(int layer);  // collective
  std::vector<std::vector<int>> keptOf(const std::vector<std::tuple<float, int, int>>& ranked, double sparsity) const;
  double sparsityOf(int layer) const;
  void calibrate();  // what-if: one pass at each of five sparsities (disco.cpp)

  const DiscoKnobs* knobs_;
  int n_ = 1, me_ = 0, w_ = 0, part_ = 0;
  std::vector<double> applied_;                   // per split layer (index l-1)
  double global_ = 0;                             // disco.sparsity as last applied to the layers
  std::vector<double> target_;                    // without knobs (benchmark): set by pruneAll
  std::vector<std::vector<std::vector<int>>> kept_;  // [l-1][receiver * n + sender] -> features (global ids)
  // [l-1][sender]: W_l[O_me, kept features of sender], gathered for inference; cleared when the
  // weights (a training step) or the mask (prune) change.
  std::vector<std::vector<Mat>> wkCache_;
  uint64_t bytes_ = 0;
  int64_t stepBase_ = 0;
  uint32_t nameEx_ = 0, nameGather_ = 0, kernF_ = 0, kernB_ = 0;
  bool pipelined_ = true, reportBytes_ = true;
  bool calibrated_ = false;  // the first step boundary calibrates too
};

}  // namespace trainscope::train
