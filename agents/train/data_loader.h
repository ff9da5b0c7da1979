// Training batches prepared ahead on a background thread, as a real job's data loader does:
// the trainer names the pieces of the next step (prefetch) while it computes the current one,
// and take() hands a piece over, waiting only if it is still being made (traced as a
// "data wait" range; the loader thread's work is a "load batch" range on its own track). The
// batches are exactly Task::train's: only when they are computed changes. A piece that was
// never prefetched is made on the caller's thread. Memory is bounded: at most the pieces of
// two steps are held, and discardBefore() drops those no step will take (after a knob change
// re-split the micro-batches).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "task.h"

namespace trainscope::train {

class DataLoader {
 public:
  // background = false: every piece is made inside take() (no thread).
  DataLoader(const Task& task, bool background);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  void prefetch(int64_t first, int count);
  Batch take(int64_t first, int count);
  void discardBefore(int64_t first);  // drops queued and finished pieces that start before first

 private:
  using Key = std::pair<int64_t, int>;
  struct Piece {
    bool ready = false;
    Batch batch;
  };
  void loop();
  static constexpr int kLoaderNice = 10;

  const Task& task_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Piece> pieces_;  // queued (not ready), in progress, or ready
  std::deque<Key> queue_;
  Key working_{-1, 0};  // the piece the loader thread is making now
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainscope::train
