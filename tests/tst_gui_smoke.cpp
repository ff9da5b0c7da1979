// The real GUI binary, offscreen: opens a session, renders its window to a PNG and exits 0;
// a corrupt file makes it exit 1 instead of hanging or crashing.
#include <QtTest>

#include <QImage>
#include <QProcess>

#include "trainscope/core/session/tsdb.h"
#include "trainscope/core/synth/synth.h"

class TstGuiSmoke : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  int runGui(const QStringList& args) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    env.insert("XDG_CONFIG_HOME", dir_.filePath("config"));  // do not touch the user's settings
    p.setProcessEnvironment(env);
    p.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope", args);
    if (!p.waitForFinished(60000)) {
      p.kill();
      return -1;
    }
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
  }

 private slots:
  void opensSessionAndRenders() {
    trainscope::core::TraceStore store;
    trainscope::core::synthesizeTrace(store, {.ranks = 2, .steps = 3, .kernelsPerStep = 8});
    const QString session = dir_.filePath("s.tsdb");
    QVERIFY(trainscope::core::saveSession(store, session.toStdString()).isOk());
    const QString png = dir_.filePath("shot.png");
    QCOMPARE(runGui({session, "--screenshot", png}), 0);
    const QImage img(png);
    QVERIFY(!img.isNull());
    QVERIFY(img.width() >= 400 && img.height() >= 300);
  }

  void corruptFileFailsCleanly() {
    const QString bad = dir_.filePath("bad.tsdb");
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(4096, 'x'));
    f.close();
    QCOMPARE(runGui({bad, "--screenshot", dir_.filePath("never.png")}), 1);
    QVERIFY(!QFileInfo::exists(dir_.filePath("never.png")));
  }

  // Every kind of load failure ends --screenshot with 1 (it used to wait forever on some): an
  // empty file, a damaged .json.gz, JSON nested 70,000 deep, a file that does not exist.
  void everyLoadFailureExitsNonZero() {
    auto write = [this](const char* name, const QByteArray& bytes) {
      QFile f(dir_.filePath(name));
      if (!f.open(QIODevice::WriteOnly)) return QString();
      f.write(bytes);
      return f.fileName();
    };
    QByteArray deep = R"([{"name":"x","ph":"X","ts":1,"dur":1,"pid":1,"tid":1,"args":{"v":)";
    deep += QByteArray(70000, '[') + QByteArray(70000, ']') + "}}]";
    const QStringList files{write("empty.tsdb", {}), write("empty.json", {}),
                            write("cut.json.gz", QByteArray("\x1f\x8b\x08\x00", 4)), write("deep.json", deep),
                            dir_.filePath("missing.tsdb")};
    for (const QString& f : files) {
      QVERIFY(!f.isEmpty());
      const QString png = dir_.filePath("never-" + QFileInfo(f).fileName() + ".png");
      QCOMPARE(runGui({f, "--screenshot", png}), 1);
      QVERIFY2(!QFileInfo::exists(png), qPrintable(f));
    }
  }
};

QTEST_GUILESS_MAIN(TstGuiSmoke)
#include "tst_gui_smoke.moc"
