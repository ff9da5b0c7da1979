// trainscope-cli end to end: the real binary on real files (synth -> info -> export -> import
// -> info), and its error messages and exit codes.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

namespace {

struct Run {
  int code = -1;
  QString out;
  QString err;
};

Run cli(const QStringList& args) {
  QProcess p;
  p.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli", args);
  Run r;
  if (!p.waitForFinished(120000)) {
    r.err = "timed out";
    return r;
  }
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

QJsonObject infoJson(const QString& file) {
  const Run r = cli({"info", file, "--json"});
  if (r.code != 0) qWarning() << r.err;
  return QJsonDocument::fromJson(r.out.toUtf8()).object();
}

}  // namespace

class TstCli : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void helpListsCommands() {
    const Run r = cli({"--help"});
    QCOMPARE(r.code, 0);
    for (const char* c : {"info", "export", "import", "synth", "env"}) QVERIFY2(r.out.contains(c), c);
    const Run sub = cli({"export", "--help"});
    QCOMPARE(sub.code, 0);
    QVERIFY(sub.out.contains("--format"));
    QVERIFY(sub.out.contains("--out"));
  }

  // Counts follow from the synthetic job's shape: per rank and step one step window, 2K+1
  // kernels (forward, backward, optimizer) and B bucket allreduces.
  void synthInfoCounts() {
    const QString f = dir_.filePath("synth.tsdb");
    const Run r = cli({"synth", "--ranks", "3", "--steps", "5", "--kernels", "8", "--buckets", "2", "--out", f});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const QJsonObject j = infoJson(f);
    QCOMPARE(j["schema_version"].toInt(), 2);
    QCOMPARE(j["rank_count"].toInt(), 3);
    QCOMPARE(j["track_count"].toInt(), 3 * 4);
    const QJsonObject kinds = j["events_per_kind"].toObject();
    QCOMPARE(kinds["step"].toInt(), 3 * 5);
    QCOMPARE(kinds["kernel"].toInt(), 3 * 5 * (2 * 8 + 1));
    QCOMPARE(kinds["collective"].toInt(), 3 * 5 * 2);
    QCOMPARE(kinds["p2p_send"].toInt(), 3 * 5);
    QCOMPARE(kinds["knob_change"].toInt(), 3);
    qint64 sum = 0;
    for (const auto& v : kinds) sum += v.toInteger();
    QCOMPARE(j["event_count"].toInteger(), sum);
    QVERIFY(j["end_ns"].toInteger() > j["start_ns"].toInteger());
    QCOMPARE(j["ranks"].toArray().size(), 3);
    QCOMPARE(j["ranks"].toArray()[1].toObject()["host"].toString(), QString("node0"));
    // The text form says the same.
    const Run text = cli({"info", f});
    QCOMPARE(text.code, 0);
    QVERIFY(text.out.contains("schema    v2"));
    QVERIFY(text.out.contains(QString("events    %1").arg(QLocale::c().toString(sum).replace(QLocale::c().groupSeparator(), ","))));
  }

  // Issue #2 "done when": info on an exported-then-imported file prints correct counts.
  void exportImportKeepsCounts() {
    const QString f = dir_.filePath("a.tsdb"), json = dir_.filePath("a.json"), back = dir_.filePath("b.tsdb");
    QCOMPARE(cli({"synth", "--ranks", "4", "--steps", "3", "--out", f}).code, 0);
    const Run ex = cli({"export", f, "--format", "chrome", "--out", json});
    QVERIFY2(ex.code == 0, qPrintable(ex.err));
    QVERIFY(QFileInfo(json).size() > 1000);
    const Run im = cli({"import", json, "--out", back});
    QVERIFY2(im.code == 0, qPrintable(im.err));
    const QJsonObject a = infoJson(f), b = infoJson(back);
    QCOMPARE(b["event_count"].toInteger(), a["event_count"].toInteger());
    QCOMPARE(b["events_per_kind"].toObject(), a["events_per_kind"].toObject());
    QCOMPARE(b["rank_count"].toInt(), a["rank_count"].toInt());
    QCOMPARE(b["track_count"].toInt(), a["track_count"].toInt());
    QCOMPARE(b["end_ns"].toInteger() - b["start_ns"].toInteger(), a["end_ns"].toInteger() - a["start_ns"].toInteger());
    // info also reads the JSON directly.
    QCOMPARE(infoJson(json)["event_count"].toInteger(), a["event_count"].toInteger());
  }

  void errorsNameTheFileAndProblem() {
    const QString missing = dir_.filePath("nope.tsdb");
    Run r = cli({"info", missing});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("not-found") && r.err.contains(missing), qPrintable(r.err));

    const QString text = dir_.filePath("notes.tsdb");
    QFile f(text);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("these are my notes, not a session\n");
    f.close();
    r = cli({"info", text});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("not-sqlite") && r.err.contains(text), qPrintable(r.err));

    const QString bad = dir_.filePath("bad.json");
    QFile j(bad);
    QVERIFY(j.open(QIODevice::WriteOnly));
    j.write("{\"traceEvents\": [ {\"ph\": \"X\", ");
    j.close();
    r = cli({"import", bad, "--out", dir_.filePath("x.tsdb")});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("malformed-json") && r.err.contains(bad), qPrintable(r.err));
    QVERIFY(!QFileInfo::exists(dir_.filePath("x.tsdb")));

    r = cli({"export", missing, "--format", "bogus", "--out", "x"});
    QCOMPARE(r.code, 2);  // usage error
    r = cli({"frobnicate"});
    QCOMPARE(r.code, 2);
  }

  void envReportsGpuStack() {
    const Run r = cli({"env", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QVERIFY(j["agent"].toString().startsWith("trainscope-agent"));
    if (j["built_with_gpu"].toBool()) {
      QVERIFY(j["cuda_runtime_version"].toInt() >= 12000);
      QVERIFY(j["nccl_version"].toInt() > 0);
      QVERIFY(j["cupti_api_version"].toInt() > 0);
    }
    // Without a device the count is 0 and the reason is given; with one, a name.
    if (j["device_count"].toInt() == 0) QVERIFY(!j["device_error"].toString().isEmpty());
    else QVERIFY(!j["first_device"].toString().isEmpty());
  }
};

QTEST_GUILESS_MAIN(TstCli)
#include "tst_cli.moc"
