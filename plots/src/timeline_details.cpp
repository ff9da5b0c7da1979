#include "trainscope/plots/timeline_details.h"

#include <QLocale>
#include <QStringList>

#include "timeline_layout.h"

namespace trainscope::plots {
namespace {

QString q(std::string_view s) {
  return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())).toHtmlEscaped();
}

QString attrName(const core::TraceStore& s, const core::Attr& a) {
  if (a.isCustom()) return q(s.str(a.key - core::kCustomAttrBase));
  return q(core::builtinAttrName(static_cast<core::AttrKey>(a.key)));
}

QString attrValue(const core::TraceStore& s, const core::Attr& a) {
  switch (a.type) {
    case core::AttrType::Int: {
      if (a.key == static_cast<uint32_t>(core::AttrKey::CommHash))
        return QStringLiteral("0x%1").arg(a.asInt(), 0, 16);
      if (a.key == static_cast<uint32_t>(core::AttrKey::Bytes))
        return QLocale().formattedDataSize(a.asInt()) + QStringLiteral(" (%1)").arg(a.asInt());
      return QString::number(a.asInt());
    }
    case core::AttrType::Double:
      return QString::number(a.asDouble(), 'g', 8);
    case core::AttrType::String:
      return q(s.str(a.asString()));
  }
  return {};
}

QString where(const TimelineData& d, core::TrackId t) {
  const core::TrackInfo& info = d.store.track(t);
  return QStringLiteral("rank %1 · %2").arg(info.rank).arg(q(info.name));
}

}  // namespace

QString layout::formatDuration(int64_t ns, int64_t res) {
  const double v = static_cast<double>(ns);
  const int64_t a = std::abs(ns);
  auto digits = [&](double unit) {
    if (res <= 0) return 3;
    int d = 0;
    for (double r = static_cast<double>(res) / unit; r < 1 && d < 6; r *= 10) ++d;
    return d;
  };
  if (a >= 1'000'000'000) return QStringLiteral("%1 s").arg(v / 1e9, 0, 'f', digits(1e9));
  if (a >= 1'000'000) return QStringLiteral("%1 ms").arg(v / 1e6, 0, 'f', digits(1e6));
  if (a >= 1'000) return QStringLiteral("%1 µs").arg(v / 1e3, 0, 'f', digits(1e3));
  return QStringLiteral("%1 ns").arg(ns);
}

QString eventTooltipHtml(const TimelineData& d, EventRef ev, uint32_t merged) {
  const auto& e = d.store.rawEvents(ev.track);
  QString html =
      QStringLiteral("<b>%1</b> <i>%2</i><br>%3 · start +%4<br>%5")
          .arg(q(d.store.str(e.name(ev.index))), q(core::eventKindName(e.kind(ev.index))),
               layout::formatDuration(e.end(ev.index) - e.start(ev.index)),
               layout::formatDuration(e.start(ev.index) - d.model.spanStart()), where(d, ev.track));
  if (merged > 1)
    html +=
        QStringLiteral("<br><span style='color:#a05000'>one of %1 events drawn merged here — zoom in</span>")
            .arg(QLocale().toString(merged));
  return html;
}

QString eventDetailsHtml(const TimelineData& d, EventRef ev) {
  if (!ev.valid() || ev.track >= d.store.trackCount() || ev.index >= d.store.rawEvents(ev.track).size())
    return QStringLiteral("<p>No event selected. Click an event in the timeline.</p>");
  const auto& e = d.store.rawEvents(ev.track);
  const int64_t s = e.start(ev.index), en = e.end(ev.index);
  QString html = QStringLiteral("<h3>%1</h3><table cellspacing=3>").arg(q(d.store.str(e.name(ev.index))));
  auto row = [&](const QString& k, const QString& v) {
    html += QStringLiteral("<tr><td style='color:#555'>%1</td><td>%2</td></tr>").arg(k, v);
  };
  row(QStringLiteral("kind"), q(core::eventKindName(e.kind(ev.index))));
  row(QStringLiteral("duration"), layout::formatDuration(en - s));
  row(QStringLiteral("start"),
      QStringLiteral("+%1 (%2 ns)").arg(layout::formatDuration(s - d.model.spanStart())).arg(s));
  row(QStringLiteral("end"), QStringLiteral("+%1").arg(layout::formatDuration(en - d.model.spanStart())));
  row(QStringLiteral("track"),
      where(d, ev.track) + QStringLiteral(" (%1)").arg(q(core::trackKindName(d.store.track(ev.track).kind))));
  for (const core::Attr& a : e.attrs(ev.index)) row(attrName(d.store, a), attrValue(d.store, a));
  html += QStringLiteral("</table>");
  const auto links = d.model.linkedEvents(ev);
  if (!links.empty()) {
    html += QStringLiteral("<h4>Linked events</h4><ul style='margin-left:-20px'>");
    for (const auto& l : links) {
      const auto& le = d.store.rawEvents(l.ref.track);
      html += QStringLiteral("<li><a href='event:%1:%2'>%3</a> — %4, %5 (%6)</li>")
                  .arg(l.ref.track)
                  .arg(l.ref.index)
                  .arg(q(d.store.str(le.name(l.ref.index))), where(d, l.ref.track),
                       layout::formatDuration(le.end(l.ref.index) - le.start(l.ref.index)),
                       QString::fromLatin1(l.why));
    }
    html += QStringLiteral("</ul>");
  }
  return html;
}

QString selectionHtml(const SelectionStats& st) {
  const QLocale loc;
  QString html = QStringLiteral("<h3>Selection</h3><p>%1 · %2 events</p><table cellspacing=3>")
                     .arg(layout::formatDuration(st.durationNs))
                     .arg(loc.toString(static_cast<qulonglong>(st.events)));
  html +=
      QStringLiteral("<tr><th align=left>kind</th><th align=right>events</th><th align=right>time</th></tr>");
  for (int k = 0; k < core::kEventKindCount; ++k) {
    if (!st.countPerKind[k]) continue;
    html += QStringLiteral("<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td></tr>")
                .arg(q(core::eventKindName(static_cast<core::EventKind>(k))))
                .arg(loc.toString(static_cast<qulonglong>(st.countPerKind[k])))
                .arg(layout::formatDuration(st.nsPerKind[k]));
  }
  return html + QStringLiteral("</table>");
}

EventRef parseEventLink(const QString& link) {
  const QStringList parts = link.split(':');
  if (parts.size() != 3 || parts[0] != QLatin1String("event")) return {};
  bool ok1 = false, ok2 = false;
  const uint t = parts[1].toUInt(&ok1), i = parts[2].toUInt(&ok2);
  if (!ok1 || !ok2) return {};
  return {t, i};
}

}  // namespace trainscope::plots
