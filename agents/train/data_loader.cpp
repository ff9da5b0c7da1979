#include "data_loader.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include "trainscope/agent.h"

namespace trainscope::train {

DataLoader::DataLoader(const Task& task, bool background) : task_(task) {
  if (background) thread_ = std::thread([this] { loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DataLoader::prefetch(int64_t first, int count) {
  if (!thread_.joinable() || count <= 0) return;
  {
    std::lock_guard lock(mu_);
    const Key k{first, count};
    if (pieces_.count(k)) return;
    pieces_.emplace(k, Piece{});
    queue_.push_back(k);
  }
  cv_.notify_all();
}

Batch DataLoader::take(int64_t first, int count) {
  const Key k{first, count};
  {
    std::unique_lock lock(mu_);
    auto it = pieces_.find(k);
    if (it != pieces_.end()) {
      if (!it->second.ready) {
        const auto q = std::find(queue_.begin(), queue_.end(), k);
        if (q != queue_.end()) {  // not started: make it here rather than wait behind others
          queue_.erase(q);
          pieces_.erase(it);
          it = pieces_.end();
        } else {
          TS_RANGE("data wait");
          cv_.wait(lock, [&] { return pieces_.at(k).ready; });
          it = pieces_.find(k);
        }
      }
      if (it != pieces_.end() && it->second.ready) {
        Batch b = std::move(it->second.batch);
        pieces_.erase(it);
        return b;
      }
    }
  }
  TS_RANGE("load batch");
  return task_.train(first, count);
}

void DataLoader::discardBefore(int64_t first) {
  std::lock_guard lock(mu_);
  for (auto it = pieces_.begin(); it != pieces_.end();) {
    if (it->first.first < first && it->first != working_) {
      queue_.erase(std::remove(queue_.begin(), queue_.end(), it->first), queue_.end());
      it = pieces_.erase(it);
    } else {
      ++it;
    }
  }
}

void DataLoader::loop() {
  // Below the compute thread: where ranks share cores, the loader runs in the time its rank
  // waits (a waiting rank sleeps: Backoff) instead of stretching the rank's forward passes.
  // Linux applies a thread's nice value to that thread only.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kLoaderNice);
  pthread_setname_np(pthread_self(), "data loader");  // the timeline's track name
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    working_ = queue_.front();
    queue_.pop_front();
    lock.unlock();
    Batch b;
    {
      TS_RANGE("load batch");
      b = task_.train(working_.first, working_.second);
    }
    lock.lock();
    if (auto it = pieces_.find(working_); it != pieces_.end()) {
      it->second.batch = std::move(b);
      it->second.ready = true;
    }
    working_ = {-1, 0};
    cv_.notify_all();
  }
}

}  // namespace trainscope::train
