// LiveSession's private parts shared by its two sources (live_session.cpp: connections, ingest,
// the loop; knob_protocol.cpp: the knob calls' state machine).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/core/live/live_session.h"

namespace trainscope::core {

struct LiveSession::Rank {
  int32_t rank = 0;
  discovery::Entry entry;
  std::unique_ptr<AgentClient> client;
  std::unique_ptr<BatchIngestor> ingestor;
  ClockSync firstSync;   // at the first attach
  ClockSync lastSync;    // the latest accepted estimate
  int64_t clockDriftNs = 0;
  bool hasDrift = false;
  bool seen = false;
  int offsetUpdates = 0;
  int attaches = 0;
  std::string offsetLog;  // "t_s:offset_ns" per update
  size_t offsetLogEntries = 0;
  std::string problem;
  int64_t retryAtNs = 0;
  // Store changes the owner makes at its next publish, under the store's lock (it never waits
  // for that lock): a new ingestor, a re-attach's skip of the repeated history, a new offset.
  std::optional<RankInfo> newIngestor;
  bool skipOnPublish = false;
  std::optional<int64_t> offsetOnPublish;
  bool open() const { return client && !client->closed(); }
  int64_t offsetNs() const {
    return offsetOnPublish ? *offsetOnPublish
           : newIngestor   ? newIngestor->clockOffsetNs
           : ingestor      ? ingestor->rank().clockOffsetNs
                           : 0;
  }
};

// One call's state. A set call walks: Lists (every rank's list) -> Fill (sequence gaps an earlier
// client left) -> Authority (the lowest rank numbers the changes; AuthorityList/Retry when
// another client took a number at the same moment) -> Others (the rest accept them) -> Apply
// (every rank applied them, all at one step). Each phase has a deadline; the error names the
// ranks that did not answer.
struct LiveSession::KnobOp {
  enum class Kind { List, ListAll, Set };
  enum class Phase { Queued, Lists, Fill, Authority, AuthorityList, AuthorityRetry, Others, Apply };
  using Key = std::pair<int32_t, uint64_t>;  // (rank, change sequence)

  Kind kind = Kind::List;
  Phase phase = Phase::Queued;
  std::shared_ptr<KnobCall> call;
  std::vector<std::pair<std::string, std::string>> changes;
  int applyTimeoutMs = 0;
  int64_t deadlineNs = 0;
  std::vector<int32_t> ranks;  // lowest first: ranks.front() is the sequence authority
  std::map<int32_t, wire::KnobList> lists;
  std::set<int32_t> listsWanted;
  std::map<Key, wire::KnobAck> firstAck;  // the answer to a SetKnob (accepted or refused)
  std::map<Key, wire::KnobAck> finalAck;  // applied, or refused when applying
  std::set<Key> acksWanted;
  std::vector<wire::KnobDescriptor> knobs;
  uint64_t next = 0, taken = 0;
  std::vector<std::optional<wire::KnobAck>> got;
  std::vector<KnobCall::Applied> out;
  std::vector<size_t> retry;  // changes whose number another client took
  size_t retryPos = 0;
  uint64_t retrySeq = 0;
  std::string refusals;
};

}  // namespace trainscope::core
