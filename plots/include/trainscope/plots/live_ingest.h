// LiveIngest: attaches to the ranks of a running job and streams their events into a
// TimelineData on its own thread (no Qt). Attaching never restarts or pauses the job: it
// connects to each rank's agent, aligns clocks (ping-pong), subscribes with the flight-recorder
// history first, then live batches. Socket reads and decoding happen without the data lock; the
// lock is held only to ingest a round of batches and update the model (a few ms at most).
//
// A rank that cannot be reached or that goes away is reported in stats(); what arrived stays.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/core/agent_client.h"
#include "trainscope/core/discovery.h"
#include "trainscope/plots/timeline_data.h"

namespace trainscope::plots {

class LiveIngest {
 public:
  enum class State { Connecting, Live, Ended, Failed, Detached };
  struct Stats {
    State state = State::Connecting;
    std::string jobId;
    int ranksTotal = 0;
    int ranksConnected = 0;  // connected now
    int ranksSeen = 0;       // ranks that delivered at least one batch
    uint64_t events = 0;
    double eventsPerSecond = 0;
    uint64_t dropped = 0;      // reported by the agents
    int64_t clockErrorNs = 0;  // largest clock-sync error bound over the ranks
    std::string message;       // last problem, for the status bar
  };

  explicit LiveIngest(std::shared_ptr<TimelineData> data);
  ~LiveIngest();  // detaches
  LiveIngest(const LiveIngest&) = delete;
  LiveIngest& operator=(const LiveIngest&) = delete;

  // Starts the ingest thread for these ranks (discovery entries; remote ones carry a tcp
  // endpoint and a secret file).
  void start(std::vector<core::discovery::Entry> entries, core::AgentClient::Options options);
  // Stops streaming and closes the connections; the data stays. Idempotent.
  void detach();
  Stats stats() const;
  const std::shared_ptr<TimelineData>& data() const { return data_; }

 private:
  void run(std::vector<core::discovery::Entry> entries, core::AgentClient::Options options);
  void setMessage(State s, const std::string& message);

  std::shared_ptr<TimelineData> data_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex statsMutex_;
  Stats stats_;
};

const char* stateName(LiveIngest::State s);

}  // namespace trainscope::plots
