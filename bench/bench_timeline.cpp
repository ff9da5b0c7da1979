// Timeline benchmark: what the GUI pays for 1 M and 10 M events.
//
//   bench_timeline [--events N,N,...] [--width PX] [--runs R] [--out DIR] [--keep 1] [--open-only 1]
//
// --keep 1 reuses (and keeps) DIR/bench_timeline_<N>.tsdb when it exists, so repeated open
// measurements skip synthesis; --open-only 1 skips the frame measurements.
// For each size: a synthetic multi-rank trace (core::synthesizeTrace: steps, phases, launches,
// kernels, bucketed allreduce, send/recv, counters) is
//  1. saved as a .tsdb and opened "ready to navigate" the way the GUI does it (SessionReader::open
//     + loadAll + shrinkToFit + TimelineModel::rebuild) -- timed end to end, page cache warm;
//  2. measured for memory: store + model bytes per event;
//  3. asked for one frame (TimelineModel::drawItems over *every* row, width PX, merge below 2 px)
//     at full zoom-out, mid zoom (1/50 of the trace) and deep zoom (1/5000, about one step's
//     kernels) at 64 places across the trace -- median and max per frame.
// The anchor: a naive frame that draws every event overlapping the window (what paintEvent
// would do without level of detail) at the same zooms. Both are also painted (QPainter::fillRect
// into a QImage of width PX, 18 px per row) so the cost of drawing what was prepared shows.
// Prints markdown for docs/BENCHMARKS.md.
#include <sys/resource.h>

#include <QImage>
#include <QPainter>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/synth/synth.h"
#include "trainscope/plots/timeline_model.h"

using namespace trainscope;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// User + system CPU seconds of this process so far: on a shared, loaded machine the wall time
// of the open mostly measures the other processes; this is what the open itself cost.
double cpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

long maxRssKb() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// ~1040 events per rank and step with 256 kernels per phase.
core::SynthOptions synthFor(uint64_t events) {
  core::SynthOptions o;
  o.ranks = 8;
  o.kernelsPerStep = 256;
  o.steps = std::max<int>(1, static_cast<int>(events / (8 * 1043)));
  return o;
}

struct FrameStats {
  double medianMs = 0, maxMs = 0;
  size_t items = 0;  // median frame's items
};

template <typename F>
FrameStats frames(const plots::TimelineModel& m, double fraction, int places, F&& frame) {
  const int64_t span = m.spanEnd() - m.spanStart();
  const auto w = std::max<int64_t>(1000, static_cast<int64_t>(static_cast<double>(span) * fraction));
  std::vector<std::pair<double, size_t>> t;
  for (int i = 0; i < places; ++i) {
    const int64_t t0 = m.spanStart() + (places > 1 ? (span - w) * i / (places - 1) : 0);
    const auto a = Clock::now();
    const size_t items = frame(t0, t0 + w);
    t.emplace_back(ms(Clock::now() - a), items);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2].first, t.back().first, t[t.size() / 2].second};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {1'000'000, 10'000'000};
  double width = 1920;
  int places = 64;
  fs::path out = "/tmp";
  bool keep = false, openOnly = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--events")) {
      sizes.clear();
      for (char* p = std::strtok(argv[i + 1], ","); p; p = std::strtok(nullptr, ","))
        sizes.push_back(std::strtoull(p, nullptr, 10));
    } else if (!std::strcmp(argv[i], "--width")) {
      width = std::atof(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--runs")) {
      places = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--out")) {
      out = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--keep")) {
      keep = std::atoi(argv[i + 1]) != 0;
    } else if (!std::strcmp(argv[i], "--open-only")) {
      openOnly = std::atoi(argv[i + 1]) != 0;
    }
  }
  std::printf(
      "| events | open .tsdb ready to navigate | of which loadAll | model rebuild | CPU time of the open "
      "(user + sys) | bytes/event (store + model) | peak RSS |\n|---|---|---|---|---|---|---|\n");
  std::vector<std::string> frameRows;
  for (uint64_t n : sizes) {
    const fs::path file = out / ("bench_timeline_" + std::to_string(n) + ".tsdb");
    if (!keep || !fs::exists(file)) {
      core::TraceStore s;
      (void)core::synthesizeTrace(s, synthFor(n));
      if (core::Status st = core::saveSession(s, file); !st.isOk()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
    }
    const long rssBefore = maxRssKb();
    plots::TimelineModel* modelPtr = nullptr;
    auto store = std::make_unique<core::TraceStore>();
    const double cpu0 = cpuSeconds();
    const auto t0 = Clock::now();
    auto reader = core::SessionReader::open(file);
    if (!reader) return 1;
    if (core::Status st = reader.value()->loadAll(*store); !st.isOk()) return 1;
    const auto t1 = Clock::now();
    store->shrinkToFit();
    plots::TimelineModel model(*store);
    model.rebuild();
    const auto t2 = Clock::now();
    const double cpu = cpuSeconds() - cpu0;
    modelPtr = &model;
    const double bytes = static_cast<double>(store->memoryBytes() + model.memoryBytes()) /
                         static_cast<double>(model.eventCount());
    std::printf("| %.1f M | **%.2f s** | %.2f s | %.2f s | %.2f s | %.1f (%.1f + %.1f) | %ld MB (+%ld) |\n",
                static_cast<double>(store->eventCount()) / 1e6, ms(t2 - t0) / 1e3, ms(t1 - t0) / 1e3,
                ms(t2 - t1) / 1e3, cpu, bytes,
                static_cast<double>(store->memoryBytes()) / static_cast<double>(model.eventCount()),
                static_cast<double>(model.memoryBytes()) / static_cast<double>(model.eventCount()),
                maxRssKb() / 1024, (maxRssKb() - rssBefore) / 1024);
    if (openOnly) continue;
    const int64_t minPx = 2;
    std::vector<plots::DrawItem> items;
    QImage canvas(static_cast<int>(width), static_cast<int>(model.rowCount()) * 18, QImage::Format_RGB32);
    bool paint = false;
    auto rect = [&](QPainter& p, size_t r, int64_t a, int64_t b, int64_t s, int64_t e) {
      const double x0 = static_cast<double>(s - a) * width / static_cast<double>(b - a);
      const double x1 = static_cast<double>(e - a) * width / static_cast<double>(b - a);
      p.fillRect(QRectF(x0, static_cast<double>(r) * 18 + 1, std::max(1.0, x1 - x0), 16),
                 QColor(0x4e, 0x79, 0xa7));
    };
    auto lodFrame = [&](int64_t a, int64_t b) {
      size_t total = 0;
      const auto minNs = static_cast<int64_t>(static_cast<double>(b - a) / width * minPx);
      QPainter p;
      if (paint) p.begin(&canvas);
      for (size_t r = 0; r < modelPtr->rowCount(); ++r) {
        modelPtr->drawItems(r, a, b, minNs, items);
        total += items.size();
        if (paint)
          for (const auto& it : items) rect(p, r, a, b, it.start, it.end);
      }
      return total;
    };
    auto naiveFrame = [&](int64_t a, int64_t b) {
      size_t total = 0;
      QPainter p;
      if (paint) p.begin(&canvas);
      for (size_t r = 0; r < modelPtr->rowCount(); ++r) {
        auto [first, last] = modelPtr->visibleRange(r, a, b);
        const auto& ev = store->rawEvents(modelPtr->row(r).track);
        int64_t sink = 0;
        for (size_t k = first; k < last; ++k) {
          const uint32_t i = modelPtr->row(r).events[k];
          sink += ev.end(i) - ev.start(i);
          if (paint) rect(p, r, a, b, ev.start(i), ev.end(i));
        }
        total += (last - first) + (sink == 42);
      }
      return total;
    };
    for (auto [label, frac] : {std::pair{"full zoom-out", 1.0}, std::pair{"mid zoom (1/50)", 0.02},
                               std::pair{"deep zoom (1/5000)", 0.0002}}) {
      const int reps = frac == 1.0 ? 9 : places;
      paint = false;
      const FrameStats lod = frames(model, frac, reps, lodFrame);
      const FrameStats naive = frames(model, frac, reps, naiveFrame);
      paint = true;
      const FrameStats lodPaint = frames(model, frac, std::min(reps, 9), lodFrame);
      const FrameStats naivePaint = frames(model, frac, std::min(reps, 9), naiveFrame);
      char row[512];
      std::snprintf(
          row, sizeof row,
          "| %.1f M | %s | %zu | **%.2f ms** (max %.2f) | %zu | %.2f ms | %.2f ms (%zu events) | %.1f ms |",
          static_cast<double>(store->eventCount()) / 1e6, label, model.rowCount(), lod.medianMs, lod.maxMs,
          lod.items, lodPaint.medianMs, naive.medianMs, naive.items, naivePaint.medianMs);
      frameRows.push_back(row);
    }
    if (keep) continue;
    fs::remove(file);
    fs::remove(file.string() + "-wal");
    fs::remove(file.string() + "-shm");
  }
  std::printf(
      "\n| events | view | rows | frame preparation with LOD (median, max) | items | LOD prepare + paint | "
      "anchor: visit every visible event | anchor: visit + paint each "
      "|\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : frameRows) std::printf("%s\n", r.c_str());
  return 0;
}
