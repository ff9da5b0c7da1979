// The GUI's own threads for work off the GUI thread (loading, saving, analysis, what-if, apply,
// export, compare). Never Qt's global pool: QPainter's raster engine runs parts of large fills on
// that one, so a task of ours that waits (for a snapshot's lock, for a knob call) must never sit
// where a paint waits for its helpers (docs/ARCHITECTURE.md, "Who owns what").
//
// The work runs below the GUI thread and the engine (nice 10 on Linux, per thread): a live
// analysis that keeps a core busy must not take the core the event loop, the raster engine's
// helpers or the ingest thread wake up on. On the 2-core VM with a 4-rank demo, the GUI thread
// waited 14 s on the run queue in 15 s of wall time before this (docs/BENCHMARKS.md, "GUI
// responsiveness"); a low-priority thread still gets ~10 % of a contended core, so a slice that
// holds a lock is not starved for long.
#pragma once

#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>
#include <utility>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace trainscope::app {

inline QThreadPool& workPool() {
  static QThreadPool* pool = [] {
    auto* p = new QThreadPool;  // lives as long as the process: tasks may outlive a window
    p->setMaxThreadCount(4);
    p->setObjectName(QStringLiteral("trainscope-work"));
    return p;
  }();
  return *pool;
}

// Lowers the calling thread below the interactive ones, once per thread.
inline void lowerWorkThreadPriority() {
#ifdef __linux__
  thread_local const bool lowered = [] {
    return ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10) == 0;
  }();
  (void)lowered;
#endif
}

// Runs f on the work pool, at the work pool's priority: QtConcurrent::run(&workPool(), f).
template <class F>
auto runWork(F f) {
  return QtConcurrent::run(&workPool(), [f = std::move(f)]() mutable {
    lowerWorkThreadPriority();
    return f();
  });
}

}  // namespace trainscope::app
