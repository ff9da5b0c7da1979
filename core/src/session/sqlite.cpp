#include "session/sqlite.h"

#include <cstdio>

namespace trainscope::core::tsdb {

Status sqliteError(sqlite3* db, int rc, const std::filesystem::path& path, std::string_view what) {
  const std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string where = path.string() + ": ";
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return {ErrorCode::Corrupt, where + "the file's structure is damaged (" + std::string(what) +
                                      ": " + detail + ")"};
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return {ErrorCode::Io, where + std::string(what) + " failed: " + detail};
    default:
      return {ErrorCode::Sqlite, where + std::string(what) + " failed: " + detail +
                                     " (SQLite error " + std::to_string(rc) + ")"};
  }
}

Status exec(sqlite3* db, const std::string& sql, const std::filesystem::path& path, std::string_view what) {
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::ok() : sqliteError(db, rc, path, what);
}

Result<Stmt> prepare(sqlite3* db, std::string_view sql, const std::filesystem::path& path) {
  sqlite3_stmt* s = nullptr;
  const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return sqliteError(db, rc, path, "preparing \"" + std::string(sql.substr(0, 60)) + "\"");
  }
  return Stmt(s);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

}  // namespace trainscope::core::tsdb
