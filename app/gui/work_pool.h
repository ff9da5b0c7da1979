// The GUI's own threads for work off the GUI thread (loading, saving, analysis, what-if, apply,
// export, compare). Never Qt's global pool: QPainter's raster engine runs parts of large fills on
// that one, so a task of ours that waits (for a snapshot's lock, for a knob call) must never sit
// where a paint waits for its helpers (docs/ARCHITECTURE.md, "Who owns what").
//
// The pool's threads run at the process's priority (kWorkNice = 0). Measured on the 2-core VM
// (docs/BENCHMARKS.md, "GUI responsiveness"): at nice 10 the GUI thread gained nothing once the
// demo yields (`demo --nice`), and with a full-rate demo the live analysis never caught up; the
// GUI thread's stalls there were the machine's cores taken by the job, not by this pool.
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

// The work pool's nice value above the process's own (see above); 0: none.
inline constexpr int kWorkNice = 0;

// Lowers the calling thread below the interactive ones, once per thread.
inline void lowerWorkThreadPriority() {
#ifdef __linux__
  if constexpr (kWorkNice <= 0) return;  // never raises a thread above the process it runs in
  thread_local const bool lowered = [] {
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    return ::setpriority(PRIO_PROCESS, tid, ::getpriority(PRIO_PROCESS, tid) + kWorkNice) == 0;
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
