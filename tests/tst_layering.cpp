// Layering rules (docs/ARCHITECTURE.md): dependencies point one way only,
//   core -> profiler -> agents,   core -> plots -> app,
// and core, profiler and agents never include or link Qt. Inside core, each subsystem (a folder
// of core/src and of core/include/trainscope/core) includes only the subsystems below it, and
// core/src holds folders only. This test scans every source file's
// #include lines and the built agent library's dynamic dependencies. It also runs the scanner on
// a constructed tree with violations, so a scanner that finds nothing cannot pass.
#include <QDir>
#include <QDirIterator>
#include <QProcess>
#include <QRegularExpression>
#include <functional>
#include <QtTest>

namespace {

// Which trainscope headers each layer may include.
const QMap<QString, QStringList> kAllowed = {
    {"core", {"core"}},
    {"profiler", {"core", "profiler"}},
    {"agents", {"core", "profiler", "agents"}},
    {"plots", {"core", "plots"}},
    {"app", {"core", "profiler", "agents", "plots", "app"}},
};
const QStringList kQtFree = {"core", "profiler", "agents"};

// core's subsystems and what each may include (itself included). session/ and wire/ never see
// analysis/; nothing below live/ knows about live connections.
const QMap<QString, QStringList> kCoreAllowed = {
    {"base", {"base"}},
    {"model", {"base", "model"}},
    {"wire", {"base", "model", "wire"}},
    {"sched", {"base", "model", "sched"}},
    {"session", {"base", "model", "session"}},
    {"interop", {"base", "model", "session", "interop"}},
    {"analysis", {"base", "model", "sched", "session", "analysis"}},
    {"live", {"base", "model", "wire", "session", "live"}},
    {"synth", {"base", "model", "sched", "session", "synth"}},
    {"tune", {"base", "model", "sched", "session", "analysis", "live", "wire", "tune"}},
};

// The subsystem an include inside core names: "trainscope/core/<sub>/x.h" (public) or "<sub>/x.h"
// (private, relative to core/src).
QString coreSubsystemOfInclude(const QString& path) {
  static const QRegularExpression pub("^trainscope/core/([a-z]+)/");
  static const QRegularExpression priv("^([a-z]+)/");
  if (auto m = pub.match(path); m.hasMatch()) return m.captured(1);
  if (auto m = priv.match(path); m.hasMatch() && kCoreAllowed.contains(m.captured(1))) return m.captured(1);
  return {};
}

// Calls fn(where, path) for every #include in the files below dir with these name patterns;
// "where" is "file:line" relative to root. An unreadable file is a violation.
void forEachInclude(const QString& root, const QString& dir, const QStringList& patterns, QStringList& violations,
                    const std::function<void(const QString& where, const QString& path)>& fn) {
  static const QRegularExpression inc(
      "^\\s*#\\s*include\\s*[<\"]([^>\"]+)[>\"]");  // no raw strings: moc misreads them
  QDirIterator files(dir, patterns, QDir::Files, QDirIterator::Subdirectories);
  while (files.hasNext()) {
    const QString file = files.next();
    QFile f(file);
    if (!f.open(QIODevice::ReadOnly)) {
      violations << file + ": unreadable";
      continue;
    }
    int lineNo = 0;
    while (!f.atEnd()) {
      const QString line = QString::fromUtf8(f.readLine());
      ++lineNo;
      const auto m = inc.match(line);
      if (m.hasMatch()) fn(QDir(root).relativeFilePath(file) + ":" + QString::number(lineNo), m.captured(1));
    }
  }
}

QStringList scanCore(const QString& root) {
  QStringList violations;
  for (const QString& flat : QDir(root + "/core/src").entryList(QDir::Files))
    violations << "core/src/" + flat + ": a file outside every subsystem folder";
  for (const QString& top : QDir(root + "/core/include/trainscope/core").entryList(QDir::Files))
    violations << "core/include/trainscope/core/" + top + ": a public header outside every subsystem folder";
  const QStringList present =
      QDir(root + "/core/src").entryList(QDir::Dirs | QDir::NoDotAndDotDot) +
      QDir(root + "/core/include/trainscope/core").entryList(QDir::Dirs | QDir::NoDotAndDotDot);
  for (const QString& sub : present)
    if (!kCoreAllowed.contains(sub)) violations << "core: unknown subsystem folder " + sub;
  for (auto it = kCoreAllowed.begin(); it != kCoreAllowed.end(); ++it) {
    for (const QString& dir :
         {root + "/core/src/" + it.key(), root + "/core/include/trainscope/core/" + it.key()})
      forEachInclude(root, dir, {"*.h", "*.cpp"}, violations, [&](const QString& where, const QString& path) {
        const QString target = coreSubsystemOfInclude(path);
        if (!target.isEmpty() && !it.value().contains(target))
          violations << where + ": core/" + it.key() + " includes core/" + target + " header " + path;
      });
  }
  return violations;
}

// "trainscope/agent.h" is the agents layer's C API; "trainscope/<layer>/x.h" names its layer.
QString layerOfInclude(const QString& path) {
  if (path == "trainscope/agent.h") return "agents";
  static const QRegularExpression re("^trainscope/([a-z]+)/");
  const auto m = re.match(path);
  return m.hasMatch() ? m.captured(1) : QString();
}

QStringList scanTree(const QString& root) {
  QStringList violations;
  static const QRegularExpression qt("^(Q[A-Za-z]+|Qt[A-Za-z]*/.*|Q[A-Z][A-Za-z]*/.*)$");
  for (auto it = kAllowed.begin(); it != kAllowed.end(); ++it) {
    const QString layer = it.key();
    forEachInclude(root, root + "/" + layer, {"*.h", "*.hpp", "*.cpp", "*.cc", "*.cu", "*.cuh", "*.c"}, violations,
                   [&](const QString& where, const QString& path) {
                     const QString target = layerOfInclude(path);
                     if (!target.isEmpty() && !it.value().contains(target))
                       violations << where + ": " + layer + " includes " + target + " header " + path;
                     if (kQtFree.contains(layer) && qt.match(path).hasMatch())
                       violations << where + ": " + layer + " includes Qt header " + path;
                   });
  }
  return violations;
}

}  // namespace

class TstLayering : public QObject {
  Q_OBJECT

 private slots:
  void scannerCatchesViolations() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    auto write = [&](const QString& rel, const QByteArray& text) {
      QDir().mkpath(QFileInfo(dir.filePath(rel)).path());
      QFile f(dir.filePath(rel));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(text);
    };
    write("core/src/a.cpp", "#include \"trainscope/core/x.h\"\n#include \"trainscope/plots/timeline.h\"\n");
    write("profiler/src/b.cpp", "#include <QString>\n#include <cupti.h>\n");
    write("agents/src/c.cpp", "  #  include <QtCore/QObject>\n#include \"trainscope/agent.h\"\n");
    write("plots/src/d.cpp", "#include <QWidget>\n#include \"trainscope/agents/x.h\"\n");
    write("app/e.cpp", "#include \"trainscope/plots/x.h\"\n#include <QApplication>\n");
    const QStringList v = scanTree(dir.path());
    QCOMPARE(v.size(), 4);
    QVERIFY(v.filter("core includes plots header").size() == 1);
    QVERIFY(v.filter("profiler includes Qt header QString").size() == 1);
    QVERIFY(v.filter("agents includes Qt header QtCore/QObject").size() == 1);
    QVERIFY(v.filter("plots includes agents header").size() == 1);

    write("core/src/session/w.cpp",
          "#include \"trainscope/core/analysis/analysis.h\"\n#include \"session/args.h\"\n");
    write("core/src/wire/x.cpp",
          "#include \"live/agent_socket.h\"\n#include \"trainscope/core/model/events.h\"\n");
    write("core/include/trainscope/core/analysis/y.h", "#include \"trainscope/core/live/agent_client.h\"\n");
    write("core/src/flat_file.cpp", "\n");
    const QStringList c = scanCore(dir.path());
    // 5: the four above, and core/src/a.cpp (written for scanTree above) is a flat file too.
    QVERIFY2(c.size() == 5, qPrintable(c.join("\n")));
    QVERIFY(c.filter("core/session includes core/analysis").size() == 1);
    QVERIFY(c.filter("core/wire includes core/live").size() == 1);
    QVERIFY(c.filter("core/analysis includes core/live").size() == 1);
    QVERIFY(c.filter("flat_file.cpp: a file outside every subsystem folder").size() == 1);
    QVERIFY(c.filter("a.cpp: a file outside every subsystem folder").size() == 1);
  }

  void sourceTreeRespectsLayers() {
    const QStringList v = scanTree(TRAINSCOPE_SOURCE_DIR);
    QVERIFY2(v.isEmpty(), qPrintable(v.join('\n')));
    // The scan really looked at files (a wrong root would find nothing and pass).
    QVERIFY(QFileInfo::exists(QString(TRAINSCOPE_SOURCE_DIR) +
                              "/core/include/trainscope/core/model/trace_store.h"));
  }

  void coreSubsystemsRespectLayers() {
    const QStringList v = scanCore(TRAINSCOPE_SOURCE_DIR);
    QVERIFY2(v.isEmpty(), qPrintable(v.join('\n')));
    QVERIFY(QFileInfo::exists(QString(TRAINSCOPE_SOURCE_DIR) + "/core/src/live/agent_client.cpp"));
  }

  // The injected library must not pull in Qt at run time either.
  void agentLibraryLinksNoQt() {
    const QString lib = QString(TRAINSCOPE_LIB_DIR) + "/libtrainscope_agent.so";
    QVERIFY2(QFileInfo::exists(lib), qPrintable(lib + " not built"));
    QProcess p;
    p.start("readelf", {"-d", lib});
    QVERIFY(p.waitForFinished(30000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(out.contains("NEEDED"), qPrintable("readelf printed no dependencies: " + out));
    QVERIFY2(!out.contains("libQt"), qPrintable(out));
  }

  // libsodium is linked statically and hidden: the .so needs no libsodium at run time, exports
  // none of its symbols (nor anything but the C API and the plugin entry points: a host's own
  // libsodium, or anything else, can never bind to our copies), and really contains it.
  void agentLibraryExportsOnlyItsApi() {
    const QString lib = QString(TRAINSCOPE_LIB_DIR) + "/libtrainscope_agent.so";
    QVERIFY2(QFileInfo::exists(lib), qPrintable(lib + " not built"));
    auto run = [](const QString& prog, const QStringList& args) {
      QProcess p;
      p.start(prog, args);
      p.waitForFinished(60000);
      return QString::fromUtf8(p.readAllStandardOutput());
    };
    const QString needed = run("readelf", {"-d", lib});
    QVERIFY2(!needed.contains("libsodium"), qPrintable(needed));
    const QString dyn = run("nm", {"-D", "--defined-only", lib});
    QVERIFY2(dyn.contains(" ts_init"), qPrintable("nm -D printed no ts_init: " + dyn.left(2000)));
    const QRegularExpression allowed("^(ts_|InitializeInjection$|ncclProfiler_v|ncclTunerPlugin_v)");
    QStringList leaked;
    for (const QString& line : dyn.split('\n', Qt::SkipEmptyParts)) {
      const QStringList f = line.split(' ', Qt::SkipEmptyParts);
      if (f.size() < 3) continue;
      const QString name = f[2].section('@', 0, 0);
      if (name.startsWith("sodium_") || name.startsWith("crypto_") || name.startsWith("randombytes") ||
          !allowed.match(name).hasMatch())
        leaked << name;
    }
    QVERIFY2(leaked.isEmpty(), qPrintable("exported beyond the C API: " + leaked.join(' ')));
    const QString all = run("nm", {lib});  // the full symbol table: local symbols included
    QVERIFY2(all.contains(" t crypto_auth_hmacsha256_init") || all.contains(" t sodium_init"),
             "libsodium's code is not inside the agent library (static link expected)");
  }
};

QTEST_GUILESS_MAIN(TstLayering)
#include "tst_layering.moc"
