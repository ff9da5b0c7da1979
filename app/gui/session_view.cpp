#include "session_view.h"
#include "work_pool.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QLabel>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "trainscope/core/interop/chrome_trace.h"
#include "trainscope/core/interop/nsys/nsys_import.h"
#include "trainscope/core/interop/trace_import.h"

namespace trainscope::app {

namespace {
constexpr int kLiveAnalysisMs = 2000;
constexpr int64_t kStragglersEveryNs = 10'000'000'000;  // live: who is slow, over the last 10 s
constexpr double kHangAfterS = 10;   // a collective open this long on some rank is a hang
constexpr int64_t kStillNs = 5'000'000'000;  // no event for this long: ask the ranks (Inspect)
}

SessionView::SessionView(QWidget* parent)
    : QWidget(parent),
      timeline_(new plots::TimelineWidget),
      analysisTimer_(new QTimer(this)),
      windowNs_(std::make_shared<std::atomic<int64_t>>(static_cast<int64_t>(kDefaultLiveWindowSeconds * 1e9))) {
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(0, 0, 0, 0);
  lay->setSpacing(0);
  hangBanner_ = new QLabel(this);
  hangBanner_->setObjectName("hangBanner");
  hangBanner_->setWordWrap(true);
  hangBanner_->setTextFormat(Qt::RichText);
  hangBanner_->setTextInteractionFlags(Qt::LinksAccessibleByMouse);
  hangBanner_->setStyleSheet("QLabel#hangBanner { background: #b3261e; color: white; padding: 6px 10px; }"
                             "QLabel#hangBanner a { color: #ffe08a; }");
  hangBanner_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
  hangBanner_->hide();
  connect(hangBanner_, &QLabel::linkActivated, this, [this](const QString& link) {
    // "rank:R:S"
    const QStringList parts = link.split(':');
    if (parts.size() >= 2) focusRank(parts[1].toInt(), parts.size() >= 3 ? parts[2].toLongLong() : -1);
  });
  lay->addWidget(hangBanner_);
  lay->addWidget(timeline_, 1);
  hangTimer_ = new QTimer(this);
  connect(hangTimer_, &QTimer::timeout, this, &SessionView::checkHang);
  connect(&hangWatcher_, &QFutureWatcher<std::optional<core::HangReport>>::finished, this,
          &SessionView::onHangChecked);
  connect(&watcher_, &QFutureWatcher<Job>::finished, this, &SessionView::onJobDone);
  connect(&analysisWatcher_, &QFutureWatcher<Analysis>::finished, this, &SessionView::onAnalysisDone);
  connect(analysisTimer_, &QTimer::timeout, this, &SessionView::analyzeNow);
}

SessionView::~SessionView() {
  // A live analysis far behind stops at its next slice; it is not waited for: it holds only
  // shared state (the store, the analyser, its mutex), never this view, so closing a tab does not
  // wait for an aggregation on a starved machine (it once took 27 s on the 2-core VM).
  cancelAnalysis_->store(true);
  watcher_.waitForFinished();
  if (live_) live_->detach();
  if (recorder_) (void)recorder_->close();
}

void SessionView::setLiveWindowSeconds(double seconds) {
  windowNs_->store(seconds > 0 ? static_cast<int64_t>(seconds * 1e9) : 0);
}

QString SessionView::title() const {
  if (!label_.isEmpty()) return label_;
  if (!path_.isEmpty() && !QFileInfo::exists(path_) && path_.contains(", "))
    return tr("%1 files").arg(path_.count(", ") + 1);  // several traces in one session
  if (!path_.isEmpty()) return QFileInfo(path_).fileName();
  return tr("(empty)");
}

void SessionView::startJob(std::function<Job()> fn) {
  watcher_.setFuture(runWork(std::move(fn)));
}

void SessionView::onJobDone() {
  Job j = watcher_.result();
  if (!j.error.isEmpty()) {
    if (!data_) timeline_->setPlaceholder(j.error);
    emit failed(j.path, j.error);
    return;
  }
  if (j.replacesData) {
    data_ = j.data;
    path_ = j.path;
    timeline_->setData(data_);
    analyzer_ = std::make_shared<core::Analyzer>();
    analysedGeneration_ = UINT64_MAX;
    emit loaded(j.path);
    analyzeNow();
  } else {
    emit saved(j.path);
  }
}

void SessionView::openFile(const QString& path) {
  openFiles({path});
}

void SessionView::openFiles(const QStringList& paths) {
  if (watcher_.isRunning() || paths.isEmpty()) return;
  const QString path = paths.join(", ");
  timeline_->setPlaceholder(tr("Loading %1 …").arg(path));
  startJob([paths, path] {
    Job j;
    j.path = path;
    j.replacesData = true;
    auto data = std::make_shared<plots::TimelineData>();
    const std::filesystem::path p = paths.first().toStdString();
    const bool session = paths.size() == 1 && !core::isNsysReportName(p) &&
                         (paths.first().endsWith(".tsdb", Qt::CaseInsensitive) ||
                          (core::hasSqliteHeader(p) && !core::looksLikeNsysExport(p)));
    if (!session) {  // traces: JSON (.json, .json.gz) or nsys exports, one file or several ranks
      std::vector<std::filesystem::path> inputs;
      for (const QString& f : paths) inputs.push_back(f.toStdString());
      auto imported = core::importTraceFiles(inputs);
      if (!imported) {
        j.error = QString::fromStdString(imported.status().message());
        return j;
      }
      data->store = std::move(imported->store);
    } else {
      auto reader = core::SessionReader::open(p);
      if (!reader) {
        j.error = QString::fromStdString(reader.status().message());
        return j;
      }
      if (core::Status s = reader.value()->loadAll(data->store); !s.isOk()) {
        j.error = QString::fromStdString(s.message());
        return j;
      }
    }
    data->store.shrinkToFit();
    data->model.rebuild();
    ++data->layoutGeneration;
    ++data->generation;
    j.data = std::move(data);
    return j;
  });
}

void SessionView::attach(std::vector<core::discovery::Entry> entries, const QString& label,
                         const QString& recordPath) {
  if (live_) live_->detach();
  if (recorder_) (void)recorder_->close();
  recorder_.reset();
  recordPath_.clear();
  entries_ = entries;
  label_ = label;
  path_.clear();
  data_ = std::make_shared<plots::TimelineData>();
  timeline_->setData(data_);
  timeline_->setFollow(true);
  analysisWatcher_.waitForFinished();
  analyzer_ = std::make_shared<core::Analyzer>();
  analysedGeneration_ = UINT64_MAX;
  analysisTimer_->start(kLiveAnalysisMs);
  stragglers_.reset();
  stragglersAtNs_->store(0);
  hang_.reset();
  hangBanner_->hide();
  hangEvents_ = 0;
  stillSinceNs_ = core::monotonicNowNs();
  hangTimer_->start(1000);
  core::LiveOptions o;
  o.client.clientName = "trainscope";
  o.client.timeoutMs = 3000;
  o.createdBy = std::string("trainscope (live attach) ") + TRAINSCOPE_VERSION;
  live_ = std::make_shared<core::LiveSession>(std::move(entries), o);
  if (!recordPath.isEmpty()) {
    // As `record`: committed at least every second, so a crash loses about a second.
    core::SessionWriter::Options wo;
    wo.commitMs = 1000;
    auto w = core::SessionWriter::create(recordPath.toStdString(), wo);
    if (!w) {
      emit failed(recordPath, QString::fromStdString(w.status().message()));
    } else {
      recorder_ = std::move(w).value();
      recordPath_ = recordPath;
      for (const auto& [k, v] : live_->metadata()) (void)recorder_->putMetadata(k, v);
      live_->setWriter(recorder_.get());
    }
  }
  startStreaming();
}

void SessionView::startStreaming() {
  // The engine ingests into this tab's store under its lock, one short round at a time; the
  // timeline model follows under the same lock, and the widget learns of it by the generations.
  core::LiveSession::StoreTarget t;
  t.store = &data_->store;
  t.mutex = &data_->mutex;
  t.ownerWaiting = &data_->ownerWaiting;
  std::shared_ptr<plots::TimelineData> d = data_;  // the engine's target lives as long as the engine
  auto window = windowNs_;
  auto analyzer = analyzer_;
  auto analyzerMutex = analyzerMutex_;
  t.underLock = [d, window, analyzer, analyzerMutex] {
    bool layout = d->model.update();
    // Live retention: once the oldest event in memory is more than window + window/8 older than
    // the newest, drop everything that starts before newest - window -- but nothing the analyser
    // still has to read (a step it has not analysed yet). Whole chunks of 1/8 window, so the
    // cost (moving the kept part down once) is amortised over window/8 of new events.
    const int64_t w = window->load();
    if (w > 0 && d->model.eventCount() > 0) {
      const int64_t newest = d->model.spanEnd();
      const int64_t chunk = std::max<int64_t>(w / 8, 1);
      // Only when the analyser is free at once (never wait for a reader): else next round.
      std::unique_lock own(*analyzerMutex, std::try_to_lock);
      if (own.owns_lock() && d->model.spanStart() < newest - w - chunk) {
        const int64_t cutoff = std::min(newest - w, analyzer ? analyzer->safeEvictBeforeNs() : newest - w);
        if (cutoff > d->model.spanStart()) {
          const std::vector<size_t> dropped = d->store.evictBefore(cutoff);
          d->model.evict(dropped, cutoff);
          if (analyzer) analyzer->evicted(dropped, cutoff);
          d->evictedEvents.store(d->store.evictedEvents());
          d->evictedBeforeNs.store(d->store.evictedBeforeNs());
          ++d->evictionGeneration;
          layout = true;
        }
      }
    }
    return layout;
  };
  t.afterUnlock = [d](bool layout) {
    if (layout) ++d->layoutGeneration;
    ++d->generation;
  };
  live_->setStore(std::move(t));
  data_->live = true;  // snapshots copy from now on: the engine writes
  analysisTimer_->start(kLiveAnalysisMs);
  timeline_->setFollow(true);
  live_->start();
}

void SessionView::finishRecording() {
  if (!recorder_) return;
  detach();  // the engine writes its final metadata first
  core::Status s = recorder_->failure();
  const core::Status c = recorder_->close();
  if (s.isOk()) s = c;
  recorder_.reset();
  const QString path = recordPath_;
  recordPath_.clear();
  if (s.isOk())
    emit saved(path);
  else
    emit failed(path, QString::fromStdString(s.message()));
}

void SessionView::detach() {
  if (live_) live_->detach();
  if (data_) data_->live = false;  // the engine stopped: nobody writes any more
  analysisTimer_->stop();
  hangTimer_->stop();
  if (hang_) {
    hang_.reset();
    hangBanner_->hide();
    emit hangChanged();
  }
  analyzeNow();  // what arrived last
  timeline_->setFollow(false);
}

void SessionView::reattach() {
  if (entries_.empty()) return;
  // The same engine and timeline: the flight recorder's history repeats what arrived before the
  // detach, and the engine skips it by sequence number, so nothing appears twice.
  if (live_ && !live_->streaming()) {
    startStreaming();
    return;
  }
  // Live entries again (the job may have new ranks or endpoints); else the remembered ones.
  std::vector<core::discovery::Entry> fresh;
  for (auto& e : core::discovery::listEntries())
    if (e.jobId == entries_.front().jobId) fresh.push_back(e);
  attach(fresh.empty() ? entries_ : fresh, label_);
}

bool SessionView::isLive() const {
  if (!live_) return false;
  const auto st = live_->snapshot().state;
  return st == core::LiveState::Live || st == core::LiveState::Connecting;
}

core::LiveSnapshot SessionView::liveStats() const {
  return live_ ? live_->snapshot() : core::LiveSnapshot{};
}

namespace {
// Writes through a temporary file beside `path` and renames it over `path` once `write` succeeded
// (issue 40): saving over the session a tab came from, or a failed write (disk full), never
// leaves the old file destroyed. `write` gets the temporary path; the error text, empty on success.
template <typename Write>
QString writeThenRename(const QString& path, Write&& write, bool session) {
  namespace fs = std::filesystem;
  const std::string target = path.toStdString();
  const std::string tmp = target + ".writing-" + std::to_string(QCoreApplication::applicationPid());
  std::error_code ec;
  auto removeTmp = [&] {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(tmp + suffix, ec);
  };
  removeTmp();
  if (QString e = write(tmp); !e.isEmpty()) {
    removeTmp();
    return e;
  }
  if (const auto old = fs::status(target, ec); !ec && fs::exists(old)) fs::permissions(tmp, old.permissions(), ec);
  ec.clear();
  fs::rename(tmp, target, ec);
  if (ec) {
    removeTmp();
    return QString::fromStdString(target + ": cannot write: " + ec.message());
  }
  if (session)  // the old session's side files would be replayed into the new one
    for (const char* suffix : {"-wal", "-shm", "-journal"}) fs::remove(target + suffix, ec);
  return {};
}
}  // namespace

void SessionView::saveAs(const QString& path) {
  if (watcher_.isRunning() || !data_) return;
  auto data = data_;
  startJob([data, path] {
    Job j;
    j.path = path;
    const auto snap = data->snapshot();  // a const store: the engine and the painter go on
    j.error = writeThenRename(
        path,
        [&](const std::string& tmp) {
          const core::Status s = core::saveSession(*snap, tmp);
          return s.isOk() ? QString() : QString::fromStdString(s.message());
        },
        true);
    return j;
  });
}

void SessionView::exportVisibleJson(const QString& path) {
  if (watcher_.isRunning() || !data_) return;
  auto data = data_;
  core::ChromeExportOptions o;
  o.fromNs = timeline_->zoom().start();
  o.toNs = timeline_->zoom().end();
  startJob([data, path, o] {
    Job j;
    j.path = path;
    const auto snap = data->snapshot();
    j.error = writeThenRename(
        path,
        [&](const std::string& tmp) {
          auto r = core::exportChromeTraceFile(*snap, tmp, o);
          return r ? QString() : QString::fromStdString(r.status().message());
        },
        false);
    return j;
  });
}

bool SessionView::exportPng(const QString& path) {
  return timeline_->grab().save(path);
}

void SessionView::analyzeNow() {
  if (!data_ || !analyzer_ || analysisWatcher_.isRunning()) return;
  const uint64_t gen = data_->generation.load();
  if (gen == analysedGeneration_) return;
  const bool live = isLive();
  auto data = data_;
  auto analyzer = analyzer_;
  auto analyzerMutex = analyzerMutex_;
  auto cancel = cancelAnalysis_;
  auto stragglersAt = stragglersAtNs_;
  analysisWatcher_.setFuture(runWork([data, analyzer, analyzerMutex, cancel, live, gen, stragglersAt] {
    Analysis a;
    a.generation = gen;
    QElapsedTimer clock;
    clock.start();
    // A reader under the shared lock: the engine flushed before it released the store, and while
    // this runs it keeps reading the sockets and publishes when the lock is free again. (Not a
    // snapshot: the incremental analyser keeps indices into this very store.) Live, the steps
    // are analysed in slices of 20 ms with the lock released in between, so that a backlog of
    // steps never holds the engine's publishing back for long.
    // The analyser is also touched by the engine (eviction, under the store's lock): its own
    // mutex, which the engine only tries, guards it; the store's lock is held only while the
    // analyser reads events, not while it aggregates.
    std::unique_lock own(*analyzerMutex);
    if (live) {
      // Behind a fast job the analyser may not catch up within a round: after a second of slices
      // it shows what it has (the next round goes on from there), so the tab never stays at
      // "No analysis yet" while events pour in.
      for (;;) {
        {
          std::shared_lock slice(data->mutex);
          analyzer->update(data->store, 20'000'000);
          if (analyzer->caughtUp() || cancel->load() || clock.elapsed() > 1000) break;
        }
        data->yieldToOwner();
      }
      if (!analyzer->caughtUp()) a.generation = UINT64_MAX;  // partial: the next round runs even if no event came
    } else {
      std::shared_lock lock(data->mutex);
      analyzer->finish(data->store);
    }
    auto result = std::make_shared<core::AnalysisResult>(analyzer->result(data->store));  // reads no events
    // The timeline draws overlays by start time: sorted here, not on the GUI thread (a live
    // window holds tens of thousands; the GUI thread sorted a copy every round before).
    std::stable_sort(result->overlays.begin(), result->overlays.end(),
                     [](const core::Overlay& x, const core::Overlay& y) { return x.startNs < y.startNs; });
    data->yieldToOwner();
    std::shared_lock lock(data->mutex);  // the sources' events (no eviction while `own` is held)
    for (auto& [key, refs] : result->sources) {
      auto& out = a.sources[key];
      out.reserve(refs.size());
      for (const core::EventRef& r : refs) {
        const core::TrackEvents& ev = data->store.rawEvents(r.track);
        if (r.index < ev.size()) out.push_back({r.track, ev.start(r.index), ev.end(r.index)});
      }
      refs.clear();  // indices die with the lock; sourcesOf() re-resolves
    }
    lock.unlock();
    // Who held the steps back: the whole file, or live the last 10 s at most every 10 s, on a copy
    // (the owner goes on publishing while the report is computed).
    const int64_t now = core::monotonicNowNs();
    if (!live || now - stragglersAt->load() >= kStragglersEveryNs) {
      stragglersAt->store(now);
      if (live) {
        data->yieldToOwner();
        const core::TraceStore recent = [&] {
          std::shared_lock l(data->mutex);
          return data->store.copyRecent(data->store.timeSpan().second - kStragglersEveryNs);
        }();
        a.stragglers = std::make_shared<const core::StragglerReport>(core::findStragglers(recent));
      } else {
        std::shared_lock l(data->mutex);
        a.stragglers = std::make_shared<const core::StragglerReport>(core::findStragglers(data->store));
      }
    }
    a.result = std::move(result);
    a.ms = static_cast<double>(clock.nsecsElapsed()) / 1e6;
    return a;
  }));
}

void SessionView::onAnalysisDone() {
  Analysis a = analysisWatcher_.result();
  analysedGeneration_ = a.generation;
  analysisMs_ = a.ms;
  analysis_ = std::move(a.result);
  sources_ = std::move(a.sources);
  if (a.stragglers) stragglers_ = std::move(a.stragglers);
  timeline_->setSortedOverlays(std::shared_ptr<const std::vector<core::Overlay>>(analysis_, &analysis_->overlays));
  emit analysisChanged();
}

void SessionView::checkHang() {
  if (!live_ || entries_.empty() || hangWatcher_.isRunning()) return;
  const core::LiveSnapshot st = live_->snapshot();
  const int64_t now = core::monotonicNowNs();
  if (st.events != hangEvents_ || st.state != core::LiveState::Live) {
    hangEvents_ = st.events;
    stillSinceNs_ = now;
    if (hang_) {  // events flow again: not hung (any more)
      hang_.reset();
      hangBanner_->hide();
      emit hangChanged();
    }
    return;
  }
  if (now - stillSinceNs_ < kStillNs) return;
  stillSinceNs_ = now;  // at most one check per 5 s while still
  auto entries = entries_;
  hangWatcher_.setFuture(runWork([entries]() -> std::optional<core::HangReport> {
    // Own connections (as `doctor` and `knobs` do): the engine's loop is never held up by this.
    core::AgentClient::Options o;
    o.timeoutMs = 3000;
    o.clientName = "trainscope (hang check)";
    auto session = core::LiveSession::connect(entries, o);
    if (!session) return std::nullopt;
    std::vector<core::RankInspection> in;
    std::set<core::RankId> seen;
    for (core::AgentClient* c : session.value()->clients()) {
      core::RankInspection ri;
      ri.rank = c->job().rank;
      auto r = c->inspect();
      ri.answered = r.isOk();
      if (r) ri.inspect = std::move(r).value();
      seen.insert(ri.rank);
      in.push_back(std::move(ri));
    }
    for (const core::discovery::Entry& e : entries)
      if (!seen.count(e.rank)) {
        core::RankInspection ri;
        ri.rank = e.rank;
        in.push_back(std::move(ri));
        seen.insert(e.rank);
      }
    std::sort(in.begin(), in.end(),
              [](const core::RankInspection& a, const core::RankInspection& b) { return a.rank < b.rank; });
    return core::findHang(in, kHangAfterS);
  }));
}

void SessionView::onHangChecked() {
  std::optional<core::HangReport> h = hangWatcher_.result();
  // Events flowed again while the ranks were asked: whatever they said is over.
  if (live_ && live_->snapshot().events != hangEvents_) h.reset();
  if (!h && !hang_) return;
  hang_ = std::move(h);
  if (hang_) {
    hangBanner_->setText(hangBannerText());
    hangBanner_->show();
  } else {
    hangBanner_->hide();
  }
  emit hangChanged();
}

QString SessionView::hangBannerText() const {
  if (!hang_) return {};
  const core::HangReport& h = *hang_;
  auto ranks = [](const std::vector<core::RankId>& v) {
    QStringList out;
    for (core::RankId r : v) out << QString::number(r);
    return out.isEmpty() ? tr("none") : out.join(", ");
  };
  QString t = h.op == "none" ? tr("<b>Hung</b>: no rank has finished a step for %1 s")
                                   .arg(h.waitedS, 0, 'f', 0)
                             : tr("<b>Hung</b> in %1%2%3 for %4 s")
                                   .arg(QString::fromStdString(h.op).toHtmlEscaped())
                                   .arg(h.seq >= 0 ? tr(" (seq %1)").arg(h.seq) : QString())
                                   .arg(h.step >= 0 ? tr(" of step %1").arg(h.step) : QString())
                                   .arg(h.waitedS, 0, 'f', 0);
  t += tr(". Waiting in it: ranks %1.").arg(ranks(h.waitingRanks));
  if (!h.missingRanks.empty()) {
    t += tr(" <b>Never entered it:</b>");
    for (const core::HangRank& r : h.ranks) {
      if (r.entered) continue;
      // Its innermost open operation and what its thread is blocked in (the first thread that has one open).
      QString what;
      for (const std::string& line : r.stacks) {
        const auto open = line.find("; open: ");
        if (open == std::string::npos) continue;
        what = QString::fromStdString(line.substr(open + 8));
        const auto in = line.find(", in ");
        if (in != std::string::npos && in < open)
          what += tr(", blocked in %1").arg(QString::fromStdString(line.substr(in + 5, line.find_first_of(" ;", in + 5) - in - 5)));
        break;
      }
      t += QString(" <a href=\"rank:%1:%2\">rank %1</a>").arg(r.rank).arg(r.step);
      if (!what.isEmpty()) t += " (" + what.toHtmlEscaped() + ")";
    }
    t += ".";
  } else {
    t += tr(" Every rank is in it: the collective itself does not complete (link or transport).");
  }
  if (!h.silentRanks.empty()) t += tr(" Did not answer: ranks %1.").arg(ranks(h.silentRanks));
  return t;
}

void SessionView::focusRank(core::RankId rank, int64_t step) {
  if (!data_) return;
  timeline_->setRankCollapsed(rank, false);
  plots::EventRef exact, newest;
  {
    std::shared_lock lock(data_->mutex, std::try_to_lock);  // the GUI thread never waits for the owner
    if (!lock.owns_lock()) return;
    const core::TraceStore& st = data_->store;
    int64_t newestStep = -1;
    for (core::TrackId t = 0; t < st.trackCount() && !exact.valid(); ++t) {
      if (st.track(t).rank != rank) continue;
      const core::TrackEvents& ev = st.rawEvents(t);
      for (size_t i = ev.size(); i-- > 0;) {
        if (ev.kind(i) != core::EventKind::Step) continue;
        const core::Attr* a = ev.findAttr(i, core::AttrKey::Step);
        const int64_t s = a ? a->asInt() : -1;
        if (s == step && step >= 0) {
          exact = {t, static_cast<uint32_t>(i)};
          break;
        }
        if (s > newestStep) {
          newestStep = s;
          newest = {t, static_cast<uint32_t>(i)};
        }
        if (step < 0 || s < step) break;  // steps only go back from here on this track
      }
    }
  }
  // A hung rank never finished the step it hangs in: its newest step then.
  const plots::EventRef ref = exact.valid() ? exact : newest;
  if (!ref.valid()) return;
  timeline_->setFollow(false);
  timeline_->selectEvent(ref, true);
}

std::vector<plots::EventRef> SessionView::sourcesOf(const QString& key) const {
  std::vector<plots::EventRef> out;
  auto it = sources_.find(key.toStdString());
  if (it == sources_.end() || !data_) return out;
  std::shared_lock lock(data_->mutex);
  for (const StableRef& r : it->second) {
    const core::TrackEvents& ev = data_->store.rawEvents(r.track);
    bool found = false;
    ev.forEachOverlapping(r.start, std::max(r.end, r.start + 1), [&](size_t i) {
      if (!found && ev.start(i) == r.start && ev.end(i) == r.end) {
        out.push_back({r.track, static_cast<uint32_t>(i)});
        found = true;
      }
    });
  }
  return out;
}

core::SessionSummary SessionView::quickSummary() const {
  core::SessionSummary s;
  if (!data_) return s;
  std::shared_lock lock(data_->mutex, std::try_to_lock);
  if (!lock.owns_lock()) return s;
  const core::TraceStore& st = data_->store;
  s.path = path_.isEmpty() ? std::filesystem::path(title().toStdString())
                           : std::filesystem::path(path_.toStdString());
  s.schemaVersion = core::kTsdbSchemaVersion;
  s.startNs = data_->model.spanStart();
  s.endNs = data_->model.spanEnd();
  for (const auto& [r, info] : st.ranks()) {
    s.ranks.push_back(info);
    s.droppedEvents += info.droppedEvents;
  }
  for (core::TrackId t = 0; t < st.trackCount(); ++t) {
    s.tracks.push_back({t, st.track(t), st.rawEvents(t).size()});
    s.eventCount += st.rawEvents(t).size();
  }
  s.metadata = st.metadata();
  return s;
}

}  // namespace trainscope::app
