#include "trainscope/plots/live_ingest.h"

#include <poll.h>

#include <algorithm>
#include <deque>

namespace trainscope::plots {

const char* stateName(LiveIngest::State s) {
  switch (s) {
    case LiveIngest::State::Connecting:
      return "connecting";
    case LiveIngest::State::Live:
      return "live";
    case LiveIngest::State::Ended:
      return "job ended";
    case LiveIngest::State::Failed:
      return "failed";
    case LiveIngest::State::Detached:
      return "detached";
  }
  return "?";
}

LiveIngest::LiveIngest(std::shared_ptr<TimelineData> data) : data_(std::move(data)) {}

LiveIngest::~LiveIngest() {
  detach();
}

void LiveIngest::start(std::vector<core::discovery::Entry> entries, core::AgentClient::Options options) {
  detach();
  stop_ = false;
  {
    std::lock_guard g(statsMutex_);
    stats_ = Stats{};
    stats_.ranksTotal =
        entries.empty() ? 0 : std::max<int>(entries.front().worldSize, static_cast<int>(entries.size()));
    stats_.jobId = entries.empty() ? std::string() : entries.front().jobId;
  }
  thread_ = std::thread(
      [this, e = std::move(entries), o = std::move(options)]() mutable { run(std::move(e), std::move(o)); });
}

void LiveIngest::detach() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
}

LiveIngest::Stats LiveIngest::stats() const {
  std::lock_guard g(statsMutex_);
  return stats_;
}

void LiveIngest::setMessage(State s, const std::string& message) {
  std::lock_guard g(statsMutex_);
  stats_.state = s;
  if (!message.empty()) stats_.message = message;
}

void LiveIngest::run(std::vector<core::discovery::Entry> entries, core::AgentClient::Options options) {
  struct Rank {
    std::unique_ptr<core::AgentClient> client;
    std::unique_ptr<core::BatchIngestor> ingestor;
    bool open = true;
    bool seen = false;
  };
  std::vector<Rank> ranks;
  std::string problems;
  int64_t clockError = 0;
  for (const auto& e : entries) {
    if (stop_) break;
    core::AgentClient::Options o = options;
    if (o.secretFile.empty()) o.secretFile = e.secretFile;
    auto c = core::AgentClient::connect(e.endpoint, o);
    if (!c) {
      problems += (problems.empty() ? "" : "; ") + std::string("rank ") + std::to_string(e.rank) + ": " +
                  c.status().message();
      continue;
    }
    auto sync = c.value()->estimateClockOffset(16);
    if (!sync) {
      problems += (problems.empty() ? "" : "; ") + std::string("rank ") + std::to_string(e.rank) +
                  ": clock sync: " + sync.status().message();
      continue;
    }
    clockError = std::max(clockError, sync->errorBoundNs);
    Rank r;
    {
      std::unique_lock lock(data_->mutex);
      r.ingestor = std::make_unique<core::BatchIngestor>(data_->store,
                                                         core::rankInfoFor(c.value()->job(), sync.value()));
      const std::string rk = std::to_string(c.value()->job().rank);
      auto& md = data_->store.metadata();
      md["job_id"] = c.value()->job().jobId;
      md["clock_domain"] = "monotonic";
      md["created_by"] = "trainscope (live attach)";
      md["clock_sync_error_ns." + rk] = std::to_string(sync->errorBoundNs);
      md["clock_offset_ns." + rk] = std::to_string(r.ingestor->rank().clockOffsetNs);
    }
    if (core::Status s = c.value()->subscribe(true); !s.isOk()) {
      problems +=
          (problems.empty() ? "" : "; ") + std::string("rank ") + std::to_string(e.rank) + ": " + s.message();
      continue;
    }
    r.client = std::move(c).value();
    ranks.push_back(std::move(r));
  }
  {
    std::lock_guard g(statsMutex_);
    stats_.ranksConnected = static_cast<int>(ranks.size());
    stats_.clockErrorNs = clockError;
    stats_.message = problems;
    stats_.state = ranks.empty() ? State::Failed : State::Live;
    if (ranks.empty() && problems.empty()) stats_.message = "no ranks to attach to";
  }
  if (ranks.empty()) return;

  std::vector<std::pair<size_t, core::wire::EventBatch>> pending;
  std::deque<std::pair<int64_t, uint64_t>> rate;  // (time, events) samples for events/s
  uint64_t events = 0;
  int64_t lastFlush = core::monotonicNowNs();
  while (!stop_) {
    std::vector<pollfd> fds;
    for (const auto& r : ranks)
      if (r.open) fds.push_back({r.client->fd(), POLLIN, 0});
    if (fds.empty()) break;
    (void)::poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      if (!r.open) continue;
      auto n = r.client->pollEvents(0, [&](const core::wire::EventBatch& b) { pending.emplace_back(i, b); });
      if (!n) {
        r.open = false;
        setMessage(State::Live,
                   "rank " + std::to_string(r.client->job().rank) + " went away: " + n.status().message());
      }
    }
    const int64_t now = core::monotonicNowNs();
    if (pending.empty() || now - lastFlush < 30'000'000) continue;
    lastFlush = now;
    bool layout = false;
    uint64_t dropped = 0;
    {
      std::unique_lock lock(data_->mutex);
      for (auto& [i, b] : pending) {
        if (core::Status s = ranks[i].ingestor->ingest(b); !s.isOk()) setMessage(State::Live, s.message());
        ranks[i].seen = true;
      }
      layout = data_->model.update();
      events = data_->model.eventCount();
      for (const auto& r : ranks) dropped += r.ingestor->rank().droppedEvents;
    }
    pending.clear();
    if (layout) ++data_->layoutGeneration;
    ++data_->generation;
    rate.emplace_back(now, events);
    while (rate.size() > 2 && now - rate.front().first > 2'000'000'000) rate.pop_front();
    std::lock_guard g(statsMutex_);
    stats_.events = events;
    stats_.dropped = dropped;
    stats_.ranksConnected =
        static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [](const Rank& r) { return r.open; }));
    stats_.ranksSeen =
        static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [](const Rank& r) { return r.seen; }));
    const double dt = static_cast<double>(now - rate.front().first) / 1e9;
    stats_.eventsPerSecond = dt > 0.2 ? static_cast<double>(events - rate.front().second) / dt : 0;
  }
  // Whatever is still pending belongs to the session too.
  if (!pending.empty()) {
    {
      std::unique_lock lock(data_->mutex);
      for (auto& [i, b] : pending) (void)ranks[i].ingestor->ingest(b);
      if (data_->model.update()) ++data_->layoutGeneration;
    }
    ++data_->generation;
  }
  bool anyOpen = false;
  for (auto& r : ranks) {
    if (r.open) {
      anyOpen = true;
      r.client->close();
    }
  }
  uint64_t total = 0;
  {
    std::shared_lock lock(data_->mutex);
    total = data_->model.eventCount();
  }
  std::lock_guard g(statsMutex_);
  stats_.events = total;
  stats_.ranksConnected = 0;
  stats_.eventsPerSecond = 0;
  stats_.state = anyOpen || stop_ ? State::Detached : State::Ended;
  if (stats_.state == State::Ended)
    stats_.message = "the job ended; " + std::to_string(stats_.events) + " events received are kept";
}

}  // namespace trainscope::plots
