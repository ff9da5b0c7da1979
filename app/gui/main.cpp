// trainscope: the GUI. `trainscope [FILE] [--screenshot OUT.png]`.
#include <QApplication>
#include <QCommandLineParser>
#include <QScreen>
#include <QTimer>

#include "main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Trainscope");
  QApplication::setApplicationName("Trainscope");
  QApplication::setApplicationVersion(TRAINSCOPE_VERSION);

  QCommandLineParser parser;
  parser.setApplicationDescription("Trainscope: see and tune distributed training while it runs.");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("file", "Session to open (.tsdb or Chrome trace .json)", "[file]");
  QCommandLineOption shot("screenshot", "Save a PNG of the window once the file is open, then quit.", "png");
  parser.addOption(shot);
  parser.process(app);

  trainscope::app::MainWindow window;
  window.show();
  const QStringList files = parser.positionalArguments();
  const QString shotPath = parser.value(shot);
  if (!shotPath.isEmpty()) {
    auto grab = [&window, shotPath] {
      QTimer::singleShot(300, &window, [&window, shotPath] {
        const bool ok = window.grab().save(shotPath);
        QCoreApplication::exit(ok ? 0 : 1);
      });
    };
    QObject::connect(&window, &trainscope::app::MainWindow::loaded, &window, grab);
    QObject::connect(&window, &trainscope::app::MainWindow::failed, &window, [] { QCoreApplication::exit(1); });
    if (files.isEmpty()) grab();
  }
  if (!files.isEmpty()) window.openFile(files.first());
  return QApplication::exec();
}
