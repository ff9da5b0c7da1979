#include "trainscope/plots/timeline_palette.h"

namespace trainscope::plots {

using core::EventKind;

QColor kindColor(EventKind k) {
  switch (k) {
    case EventKind::Kernel:
      return QColor(0x4e, 0x79, 0xa7);
    case EventKind::Memcpy:
      return QColor(0x76, 0xb7, 0xb2);
    case EventKind::Memset:
      return QColor(0x59, 0xa1, 0x4f);
    case EventKind::Collective:
      return QColor(0xf2, 0x8e, 0x2b);
    case EventKind::P2PSend:
      return QColor(0xe1, 0x57, 0x59);
    case EventKind::P2PRecv:
      return QColor(0xff, 0x9d, 0x9a);
    case EventKind::Range:
      return QColor(0xa0, 0xa8, 0xb8);
    case EventKind::Step:
      return QColor(0xd4, 0xcc, 0xc4);
    case EventKind::Phase:
      return QColor(0x8c, 0xd1, 0x7d);
    case EventKind::MicroBatchF:
      return QColor(0x59, 0xa1, 0x4f);
    case EventKind::MicroBatchB:
      return QColor(0xed, 0xc9, 0x48);
    case EventKind::MicroBatchW:
      return QColor(0xb0, 0x7a, 0xa1);
    case EventKind::Bucket:
      return QColor(0x9c, 0x75, 0x5f);
    case EventKind::Counter:
      return QColor(0x49, 0x98, 0x94);
    case EventKind::KnobChange:
      return QColor(0xff, 0x7f, 0x0e);
    case EventKind::Marker:
      return QColor(0xd3, 0x72, 0x95);
  }
  return neutralColor();
}

QColor neutralColor() {
  return QColor(0xb8, 0xb8, 0xb8);
}

QColor microBatchColor(int64_t m) {
  if (m < 0) return neutralColor();
  static const QColor hues[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48),
                                QColor(0xb0, 0x7a, 0xa1), QColor(0xff, 0x9d, 0xa7), QColor(0x9c, 0x75, 0x5f),
                                QColor(0x86, 0xbc, 0xb6)};
  return hues[m % 10];
}

QColor phaseColor(std::string_view phase) {
  if (phase == "forward" || phase == "F") return QColor(0x59, 0xa1, 0x4f);
  if (phase == "backward" || phase == "B") return QColor(0x4e, 0x79, 0xa7);
  if (phase == "W") return QColor(0xb0, 0x7a, 0xa1);
  if (phase == "optimizer") return QColor(0xf2, 0x8e, 0x2b);
  return neutralColor();
}

QColor textOn(const QColor& fill) {
  const double l = 0.299 * fill.redF() + 0.587 * fill.greenF() + 0.114 * fill.blueF();
  return l > 0.6 ? QColor(0x20, 0x20, 0x20) : QColor(Qt::white);
}

std::vector<std::pair<QString, QColor>> legend(ColorMode mode) {
  std::vector<std::pair<QString, QColor>> out;
  switch (mode) {
    case ColorMode::Kind:
      for (EventKind k :
           {EventKind::Kernel, EventKind::Memcpy, EventKind::Collective, EventKind::P2PSend,
            EventKind::P2PRecv, EventKind::Range, EventKind::Phase, EventKind::Step, EventKind::MicroBatchF,
            EventKind::MicroBatchB, EventKind::MicroBatchW, EventKind::Bucket, EventKind::Marker})
        out.emplace_back(QString::fromUtf8(core::eventKindName(k).data(),
                                           static_cast<qsizetype>(core::eventKindName(k).size())),
                         kindColor(k));
      break;
    case ColorMode::MicroBatch:
      for (int m = 0; m < 8; ++m) out.emplace_back(QStringLiteral("mb %1").arg(m), microBatchColor(m));
      out.emplace_back(QStringLiteral("none"), neutralColor());
      break;
    case ColorMode::Phase:
      for (const char* p : {"forward", "backward", "optimizer"})
        out.emplace_back(QString::fromLatin1(p), phaseColor(p));
      out.emplace_back(QStringLiteral("weight grad (W)"), phaseColor("W"));
      out.emplace_back(QStringLiteral("other"), neutralColor());
      break;
  }
  return out;
}

QString colorModeName(ColorMode mode) {
  switch (mode) {
    case ColorMode::Kind:
      return QStringLiteral("kind");
    case ColorMode::MicroBatch:
      return QStringLiteral("micro-batch");
    case ColorMode::Phase:
      return QStringLiteral("phase");
  }
  return {};
}

}  // namespace trainscope::plots
