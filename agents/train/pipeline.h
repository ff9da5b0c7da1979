// Pipeline (--mode pp) and DP x PP (--mode hybrid) training: the world is a grid of `replicas`
// pipelines of `stages` ranks (world rank = replica * stages + stage). Each rank holds the layers
// of its virtual stages (chunks) as a Model of its own; a step runs the stage's op list of the
// schedule (core::runStage with StageRunner); the stage's replicas average their gradients with
// GradSync on a sub-communicator (bucketed, overlapping the pipeline). pp.* knobs are applied at
// the step boundary by every rank alike: a new layer split moves parameters and momentum
// between ranks (one allreduce over the pipeline).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "layer_split.h"
#include "pp_knobs.h"
#include "trainer.h"

namespace trainscope::train {

// Base-from-member: the communicators exist before Trainer's GradSync is built on one of them.
struct PipeGrid {
  PipeGrid(Backend& be, const Options& o);
  int stages = 1, replicas = 1, stage = 0, replica = 0;
  std::unique_ptr<Communicator> pipe;  // this replica's pipeline; rank = stage
  std::unique_ptr<Communicator> dp;    // this stage's replicas
};

class PipelineTrainer final : private PipeGrid, public Trainer {
 public:
  PipelineTrainer(Backend& backend, const Options& o, const PpKnobs* knobs);
  bool writeParams(const std::string& path) override;  // collective: the whole model
  const core::ScheduleParams& scheduleParams() const { return params_; }

 protected:
  void atStepBoundary(int64_t s) override;
  double step(int64_t s) override;
  double evaluate() override;
  void calibrateCompute() override {}  // calibrate() times the stage's layers per micro-batch size

 private:
  LayerBounds boundsFor(const core::ScheduleParams& p) const;
  std::string checkParams(const core::ScheduleParams& p) const;
  std::vector<int> segmentsFor(const core::ScheduleParams& p) const;
  std::string segmentNote() const;
  void buildStage(const LayerBounds& bounds, std::span<const float> params, std::span<const float> velocity);
  std::vector<float> gather(std::span<const float> local);  // the whole-model layout, all ranks
  std::vector<int> ownedLayers() const;
  void calibrate();  // what-if: this stage's layers timed alone at the micro-batch sizes


  const PpKnobs* knobs_;
  int layers_ = 0;
  std::vector<size_t> globalOffset_, globalCount_;
  LayerBounds autoBounds_, bounds_;
  core::ScheduleParams params_;
  PpKnobs::Values good_;  // the knob values params_ came from
  core::Schedule schedule_;
  std::vector<int> chunkStart_;
  std::vector<int> segBounds_;  // seq1f1b on the transformer: k + 1 positions (segments.h)
  bool calibrated_ = false;     // the first step boundary calibrates too
};

}  // namespace trainscope::train
