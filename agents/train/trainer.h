// The training loop of one rank: forward, backward (B and W per layer, reverse order, gradient
// buckets reduced while the backward goes on), optimizer, counters. Reads the dp.* knobs at
// every step boundary (the agent applies agreed changes inside ts_step_begin).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend.h"
#include "data_loader.h"
#include "grad_sync.h"
#include "model.h"
#include "options.h"
#include "task.h"

namespace trainscope::train {

struct DpKnobs;  // main.cpp's registered knobs

class Trainer {
 public:
  Trainer(Backend& backend, const Options& o);
  virtual ~Trainer() = default;
  // Runs o.steps steps; knobs (may be null) are read at each step boundary.
  void run(const DpKnobs* knobs) { runSteps(knobs, 0, o_.steps); }
  // Runs steps first .. end-1 (their data and step numbers): training continued in phases.
  void runSteps(const DpKnobs* knobs, int64_t first, int64_t end);
  Model& model() { return *model_; }
  const GradSync& gradSync() const { return sync_; }
  double lastLoss() const { return lastLoss_; }
  double lastAccuracy() const { return lastAcc_; }
  // The whole model's parameters (raw float32, the one-process layout). Collective in
  // subclasses that hold a part of the model: every rank calls it.
  virtual bool writeParams(const std::string& path);

 protected:
  using ModelFactory = std::function<std::unique_ptr<Model>(Compute&)>;
  // Gradients are averaged over dpComm (a replica group; the world for plain data parallelism).
  Trainer(Backend& backend, const Options& o, Communicator& dpComm, const ModelFactory& makeModel);
  // At the step boundary, after the agent applied agreed knob changes (ts_step_begin).
  virtual void atStepBoundary(int64_t /*s*/) {}
  virtual double step(int64_t s);  // returns the training loss
  virtual double evaluate();
  // What-if calibration of the backward's compute alone (docs/TUNING.md): with no reduction in
  // flight, a forward and then the backward, B and W of every layer as a step runs them, three
  // times, traced as kernels "calibrate dp B|W" (Layer = the layer). Pipeline and DISCO trainers
  // calibrate their own way (their stages and splits): nothing here. Also sets layerPaceUs_.
  virtual void calibrateCompute();
  void optimizer();
  bool writeFloats(const std::string& pattern, std::span<const float> values) const;

 private:
  DpConfig currentConfig(const DpKnobs* knobs) const;
  void resynchronize();

 protected:
  // The model computes through this: after every GEMM it lets the buckets in flight progress
  // (MPI moves data only inside MPI calls), without the layers knowing about communication.
  class ProgressingCompute final : public Compute {
   public:
    ProgressingCompute(Compute& inner, GradSync& sync) : inner_(inner), sync_(sync) {}
    void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
              int ldb, float beta, float* c, int ldc) override {
      inner_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      sync_.progress();
    }

   private:
    Compute& inner_;
    GradSync& sync_;
  };

  Backend& be_;
  Options o_;
  std::vector<Injection> injections_;  // --inject, parsed (validate() refused bad ones)
  void injectFaults(int64_t step);
  Communicator& dp_;
  int rank_ = 0, world_ = 1;  // world_: data-parallel replicas (dp_'s size)
  std::unique_ptr<Task> task_;
  std::unique_ptr<DataLoader> data_;  // task_'s batches, a step ahead
  std::unique_ptr<Model> model_;
  GradSync sync_;
  ProgressingCompute compute_;
  std::vector<float> velocity_;
  std::vector<Mat> act_, grad_;
  Batch heldOut_;
  std::vector<uint32_t> nameF_, nameB_, nameW_;
  double lastLoss_ = 0, lastAcc_ = 0;
  // Half a layer's backward (B + W) as calibrateCompute() timed it, in us (the fastest of its
  // three passes, the mean over layers): how often a step polls its reductions (after each GEMM),
  // which the calibration of the ranks' own work on a reduction paces its polls by. 20 where not
  // timed.
  double layerPaceUs_ = 20;
};

}  // namespace trainscope::train
