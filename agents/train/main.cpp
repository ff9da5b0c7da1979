// trainscope-train: the reference training job. One process per rank:
//
//   mpirun -np 4 --oversubscribe build/bin/trainscope-train --steps 200 --model mlp
//
// Starts the agent itself (ts_init; a no-op when LD_PRELOAD already started it), registers the
// knobs of its mode (dp.* only where gradients are averaged over replicas) and the MPI agreement
// function, trains, optionally dumps the parameters.
#include <mpi.h>
#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "disco.h"
#include "disco_bench.h"
#include "dp_knobs.h"
#include "options.h"
#include "pipeline.h"
#include "pp_knobs.h"
#include "trainer.h"
#include "trainscope/agent.h"

using namespace trainscope::train;

namespace {

int64_t agreeMin(int64_t local, void* /*ctx*/) {
  int64_t global = local;
  MPI_Allreduce(&local, &global, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return global;
}

int g_rank = 0;

// The world size the launcher announces (Open MPI, MPICH/Hydra), before MPI_Init; 0 if none.
int launcherWorldSize() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(name)) return std::max(0, std::atoi(v));
  return 0;
}

bool hybridHasReplicas(const Options& o, int world) {
  return o.mode == "hybrid" && world / std::max(1, pipelineStages(o, world)) > 1;
}

int run(const Options& o, const DpKnobs& knobs, const PpKnobs& ppKnobs, const DiscoKnobs& discoKnobs, int rank,
        int world) {
  std::string why;
  auto backend = makeBackend(o.backend, &why);
  if (!backend) {
    if (rank == 0) std::fprintf(stderr, "trainscope-train: %s\n", why.c_str());
    return 2;
  }
  if (!o.noAgent) {
    ts_init_params params = TS_INIT_PARAMS_DEFAULT;
    params.rank = rank;
    params.world_size = world;
    const int rc = ts_init(&params);
    if (rc < 0 && rank == 0)
      std::fprintf(stderr, "trainscope-train: agent start returned %d (training goes on)\n", rc);
  }
  if (!o.discoBench.empty()) {
    MPI_Barrier(MPI_COMM_WORLD);
    return runDiscoBench(*backend, o);
  }
  std::unique_ptr<Trainer> trainer;
  if (o.mode == "pp" || o.mode == "hybrid")
    trainer = std::make_unique<PipelineTrainer>(*backend, o, o.noAgent ? nullptr : &ppKnobs);
  else if (o.mode == "disco")
    trainer = std::make_unique<DiscoTrainer>(*backend, o, o.noAgent ? nullptr : &discoKnobs);
  else
    trainer = std::make_unique<Trainer>(*backend, o);
  Trainer& t = *trainer;
  if (rank == 0)
    std::printf("trainscope-train: %d rank(s), model %s, %zu parameters, backend %s\n", world,
                o.model.c_str(), t.model().params().size(), backend->name.c_str());
  MPI_Barrier(MPI_COMM_WORLD);
  t.run(knobs.registered() ? &knobs : nullptr);
  if (!o.dumpParams.empty() && !t.writeParams(o.dumpParams)) {
    std::fprintf(stderr, "trainscope-train: cannot write %s\n", o.dumpParams.c_str());
    return 1;
  }
  if (knobs.registered() || o.mode == "dp") {
    const GradSync::Totals& b = t.gradSync().totals();
    std::printf("rank %d dp bytes counted: sent %llu received %llu handed-to-mpi-reductions %llu\n", rank,
                static_cast<unsigned long long>(b.sent), static_cast<unsigned long long>(b.received),
                static_cast<unsigned long long>(b.handed));
  }
  std::printf("rank %d done steps=%lld loss=%.5f accuracy=%.4f dropped=%llu\n", rank,
              static_cast<long long>(o.steps), t.lastLoss(), t.lastAccuracy(),
              static_cast<unsigned long long>(ts_dropped_events()));
  return 0;
}

// Flush-to-zero and denormals-are-zero on this thread and the threads it starts from now on
// (they inherit its floating-point control state). Without them a deep model's vanishing
// gradients and decaying momentum turn subnormal and every operation on them takes ~100x as
// long: on the 48-layer, 64-wide CPU job the optimizer phase grew from 0.14 to 10.6 ms over
// 2 500 steps (2026-11-25), so a step's time drifted with the job's age. PyTorch leaves this to
// torch.set_flush_denormal(True); GPU kernels built with fast math flush likewise.
void flushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (uint64_t{1} << 24)));  // FZ
#endif
}

// After an exception escaped the trainer (issue 40: an allocation the size checks let through
// failed on a small machine): remove the agent's discovery file, and end MPI -- the whole job
// when it has other ranks, which would otherwise wait for this one forever.
int exitAfterException() {
  ts_shutdown();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }
  return 1;
}

int trainMain(int argc, char** argv) {
  Options o;
  int code = 0;
  if (!parseOptions(argc, argv, o, &code)) return code;  // before MPI: --help needs no mpirun
  if (o.denormals == "flush") flushDenormals();  // before MPI and the loader start their threads
  // Everything that does not depend on the world size is refused before MPI starts.
  if (const std::string err = validate(o, 1); !err.empty()) {
    std::fprintf(stderr, "trainscope-train: %s\n", err.c_str());
    return 2;
  }
  // An unknown backend, or cuda without a device (or not built), is refused before MPI starts.
  if (std::string why; o.backend != "cpu" && (o.backend != "cuda" || !cudaBackendAvailable(&why))) {
    if (why.empty()) makeBackend(o.backend, &why);  // unknown: says which ones exist, needs no MPI
    std::fprintf(stderr, "trainscope-train: %s\n", why.c_str());
    return 2;
  }
  // Registered with the agreement function before MPI_Init (the slow part of start-up): an agent
  // started at load time lists them, and accepts changes, from the start.
  // dp.* only where they act: dp mode, and hybrid once the replicas are known (below); not pp
  // (one pipeline, nothing to average) nor disco (no gradient is synchronised).
  // In hybrid the launcher's world size tells (registered before MPI_Init, like the others, so
  // that every rank lists them from the start); without it, right after MPI_Init.
  const int announced = launcherWorldSize();
  DpKnobs knobs = o.mode == "dp" || (announced > 0 && hybridHasReplicas(o, announced)) ? registerDpKnobs(o, &g_rank)
                                                                                      : DpKnobs{};
  const PpKnobs ppKnobs = o.mode == "pp" || o.mode == "hybrid" ? registerPpKnobs(o) : PpKnobs{};
  // The inference benchmark sets the sparsity itself: no disco.* knobs then.
  const DiscoKnobs discoKnobs = o.mode == "disco" && o.discoBench.empty() ? registerDiscoKnobs(o) : DiscoKnobs{};
  if (!o.noAgent) ts_set_agree_fn(agreeMin, nullptr);  // only called from ts_step_end, after MPI_Init
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  g_rank = rank;
  if (const std::string err = validate(o, world); !err.empty()) {
    if (rank == 0) std::fprintf(stderr, "trainscope-train: %s\n", err.c_str());
    MPI_Finalize();
    return 2;
  }
  if (!knobs.registered() && announced == 0 && hybridHasReplicas(o, world)) knobs = registerDpKnobs(o, &g_rank);
  code = run(o, knobs, ppKnobs, discoKnobs, rank, world);
  ts_shutdown();
  MPI_Finalize();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return trainMain(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "trainscope-train: rank %d: out of memory (std::bad_alloc): the model, batch or held-out set "
                 "is too large for this machine; lower --batch, --width, --layers or --held-out\n",
                 g_rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope-train: rank %d: %s\n", g_rank, e.what());
  }
  return exitAfterException();
}
