// The GUI's own threads for work off the GUI thread (loading, saving, analysis, what-if, apply,
// export, compare). Never Qt's global pool: QPainter's raster engine runs parts of large fills on
// that one, so a task of ours that waits (for a snapshot's lock, for a knob call) must never sit
// where a paint waits for its helpers (docs/ARCHITECTURE.md, "Who owns what").
#pragma once

#include <QThreadPool>

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

}  // namespace trainscope::app
