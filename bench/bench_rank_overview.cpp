// bench_rank_overview --ranks N [--steps 400] [--json]: the rank overview (the Analysis panel's
// Ranks tab, a rank x step heat map) at N ranks, offscreen: the time to rebuild it from a result
// (setResult) and the time of a frame (a synchronous repaint of the real widget), 200 frames.
// issue 35 item 4's frame target is 16 ms; docs/BENCHMARKS.md "Many ranks".
#include <QApplication>
#include <QElapsedTimer>
#include <QWidget>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "trainscope/core/analysis/analysis.h"
#include "trainscope/plots/analysis_panel.h"

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  int ranks = 1024, steps = 400;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
  }
  QApplication app(argc, argv);
  trainscope::core::AnalysisResult r;
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.3);
  for (int k = 0; k < ranks; ++k) {
    trainscope::core::RankBreakdown b;
    b.rank = k;
    for (int s = 0; s < steps; ++s) {
      trainscope::core::BreakdownStep st;
      st.step = s;
      st.computeMs = 8 + noise(rng) + (k % 97 == 3 ? 2 : 0);
      st.exposedCommMs = 1 + std::abs(noise(rng));
      st.stepMs = 12 + noise(rng);
      b.perStep.push_back(st);
    }
    r.breakdown.push_back(std::move(b));
  }
  trainscope::plots::AnalysisPanel panel;
  panel.resize(1400, 500);
  QElapsedTimer t;
  t.start();
  panel.setResult(r);
  const double rebuildMs = double(t.nsecsElapsed()) / 1e6;
  panel.setCurrentWidget(panel.chart("ranks"));
  panel.show();
  app.processEvents();
  QWidget* view = panel.chart("ranks")->chartWidget();
  std::vector<double> frames;
  for (int i = 0; i < 200; ++i) {
    t.restart();
    view->repaint();
    frames.push_back(double(t.nsecsElapsed()) / 1e6);
  }
  std::sort(frames.begin(), frames.end());
  const double p50 = frames[frames.size() / 2], p99 = frames[frames.size() * 99 / 100];
  if (json)
    std::printf("{\"ranks\": %d, \"steps\": %d, \"rebuild_ms\": %.1f, \"frame_p50_ms\": %.2f, \"frame_p99_ms\": %.2f}\n", ranks,
                steps, rebuildMs, p50, p99);
  else
    std::printf("%d ranks x %d steps: setResult %.1f ms (all charts), frame p50 %.2f ms, p99 %.2f ms\n", ranks, steps,
                rebuildMs, p50, p99);
  return 0;
}
