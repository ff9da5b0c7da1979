// Injection into unmodified jobs: `trainscope-cli launch -- CMD` hands CMD the environment that
// makes CUDA load the agent (CUDA_INJECTION64_PATH -> InitializeInjection), NCCL load its
// profiler and tuner plugins from it, NVTX report to CUPTI, and the agent preload; the library
// exports exactly those entry points next to the C API (what CUDA and NCCL dlsym).
#include <dlfcn.h>

#include <QProcess>
#include <QStandardPaths>
#include <QtTest>

namespace {
QString agentLib() {
  return QString(TRAINSCOPE_LIB_DIR) + "/libtrainscope_agent.so";
}

QMap<QString, QString> launchEnv(const QStringList& extra) {
  QProcess p;
  QStringList args = {"launch"};
  args << extra << "--"
       << "env";
  p.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli", args);
  if (!p.waitForFinished(30000)) return {};
  QMap<QString, QString> env;
  for (const QString& line : QString::fromUtf8(p.readAllStandardOutput()).split('\n')) {
    const qsizetype eq = line.indexOf('=');
    if (eq > 0) env.insert(line.left(eq), line.mid(eq + 1));
  }
  env.insert("#exit", QString::number(p.exitCode()));
  return env;
}
}  // namespace

class TstGpuLaunch : public QObject {
  Q_OBJECT
 private slots:
  void launchSetsTheInjectionEnvironment() {
    const auto env = launchEnv({});
    QCOMPARE(env.value("#exit"), QString("0"));
    const QString lib = QFileInfo(agentLib()).canonicalFilePath();
    QVERIFY2(env.value("LD_PRELOAD").startsWith(lib), qPrintable(env.value("LD_PRELOAD")));
    QVERIFY(env.value("TRAINSCOPE_JOB_ID").startsWith("job-"));
#if TRAINSCOPE_HAVE_GPU
    QCOMPARE(env.value("CUDA_INJECTION64_PATH"), lib);
    QCOMPARE(env.value("NCCL_PROFILER_PLUGIN"), lib);
    QCOMPARE(env.value("NCCL_TUNER_PLUGIN"), lib);
    QVERIFY2(env.value("NVTX_INJECTION64_PATH").contains("libcupti"),
             qPrintable(env.value("NVTX_INJECTION64_PATH")));
#else
    QVERIFY(!env.contains("CUDA_INJECTION64_PATH"));
#endif
  }

  // Under mpirun every rank gets the variables (forwarded with -x), and mpirun itself does not
  // preload the agent.
  void everyRankGetsTheEnvironment() {
    if (QStandardPaths::findExecutable("mpirun").isEmpty()) QSKIP("mpirun not installed");
    QProcess p;
    p.start(QString(TRAINSCOPE_BIN_DIR) + "/trainscope-cli", {"launch", "--ranks", "2", "--", "env"});
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 0);
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QCOMPARE(out.count("TRAINSCOPE_JOB_ID="), 2);
    QCOMPARE(out.count("LD_PRELOAD="), 2);
#if TRAINSCOPE_HAVE_GPU
    for (const char* v :
         {"CUDA_INJECTION64_PATH=", "NCCL_PROFILER_PLUGIN=", "NCCL_TUNER_PLUGIN=", "NVTX_INJECTION64_PATH="})
      QVERIFY2(out.count(v) >= 2, v);
#endif
  }

  void noGpuLeavesCudaAlone() {
    const auto env = launchEnv({"--no-gpu"});
    QCOMPARE(env.value("#exit"), QString("0"));
    QVERIFY(!env.contains("CUDA_INJECTION64_PATH"));
    QVERIFY(!env.contains("NCCL_PROFILER_PLUGIN"));
    QVERIFY(env.contains("LD_PRELOAD"));
  }

  // nm -D: the C API, and with GPU support the CUDA/NCCL entry points; nothing else.
  void libraryExportsTheEntryPoints() {
    QProcess p;
    p.start("nm", {"-D", "--defined-only", agentLib()});
    QVERIFY(p.waitForFinished(30000));
    QStringList names;
    for (const QString& line : QString::fromUtf8(p.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts)) {
      const QStringList f = line.split(' ', Qt::SkipEmptyParts);
      if (f.size() >= 3) names << f[2].section('@', 0, 0);
    }
    QVERIFY(names.contains("ts_init"));
    const QStringList gpu = {"InitializeInjection", "ncclProfiler_v5", "ncclProfiler_v6",
                             "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"};
    for (const QString& s : gpu) QCOMPARE(names.contains(s), bool(TRAINSCOPE_HAVE_GPU));
    for (const QString& n : names)
      QVERIFY2(n.startsWith("ts_") || gpu.contains(n), qPrintable("unexpected export " + n));
  }

  // Preloaded into jobs that bring their own NCCL (PyTorch wheels): the agent must not pull in a
  // libnccl.so.2 of its own, which the loader would then hand to the job by soname.
  void agentDoesNotLinkNccl() {
    QProcess p;
    p.start("readelf", {"-d", agentLib()});
    QVERIFY(p.waitForFinished(30000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(out.contains("NEEDED"), qPrintable(out));
    QVERIFY2(!out.contains("libnccl"), qPrintable(out));
  }

#if TRAINSCOPE_HAVE_GPU
  // What NCCL does: dlopen the plugin library and dlsym the versioned table.
  void ncclFindsThePluginTables() {
    void* h = ::dlopen(agentLib().toUtf8().constData(), RTLD_NOW | RTLD_LOCAL);
    QVERIFY2(h, ::dlerror());
    struct Named {
      const char* name;
    };
    for (const char* sym :
         {"ncclProfiler_v5", "ncclProfiler_v6", "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"}) {
      const auto* t = static_cast<const Named*>(::dlsym(h, sym));
      QVERIFY2(t, sym);
      QCOMPARE(QString(t->name), QString("trainscope"));
    }
    QVERIFY(::dlsym(h, "InitializeInjection"));
    ::dlclose(h);
  }
#endif
};

QTEST_GUILESS_MAIN(TstGpuLaunch)
#include "tst_gpu_launch.moc"
