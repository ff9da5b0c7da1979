// Private helpers for the .tsdb code: RAII handles for SQLite objects and the mapping of SQLite
// result codes to core Status values. Every message names the file, because a person reading
// "database disk image is malformed" needs to know which of their files it is about.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "trainscope/core/base/status.h"

namespace trainscope::core::tsdb {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

// A prepared statement, finalized on destruction.
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(Stmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept {
    if (this != &o) {
      sqlite3_finalize(s_);
      s_ = o.s_;
      o.s_ = nullptr;
    }
    return *this;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  sqlite3_stmt* get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }

 private:
  sqlite3_stmt* s_ = nullptr;
};

// Resets a statement when the scope ends, so an early return never leaves it mid-step (which
// would keep a read transaction open and block WAL checkpoints).
class StmtReset {
 public:
  explicit StmtReset(sqlite3_stmt* s) : s_(s) {}
  ~StmtReset() { sqlite3_reset(s_); }
  StmtReset(const StmtReset&) = delete;
  StmtReset& operator=(const StmtReset&) = delete;

 private:
  sqlite3_stmt* s_;
};

// Status for a failed SQLite call: corrupt/not-a-database -> Corrupt, OS-level failures -> Io,
// anything else -> Sqlite. `what` says what we were doing ("reading events").
Status sqliteError(sqlite3* db, int rc, const std::filesystem::path& path, std::string_view what);

// Runs SQL without results (may hold several statements).
Status exec(sqlite3* db, const std::string& sql, const std::filesystem::path& path, std::string_view what);

Result<Stmt> prepare(sqlite3* db, std::string_view sql, const std::filesystem::path& path);

// Column i as int64_t (sqlite3_int64 is long long, int64_t is long: std::min would not mix them).
inline int64_t col64(sqlite3_stmt* s, int i) { return static_cast<int64_t>(sqlite3_column_int64(s, i)); }

// Text of column i as a string_view (valid until the next step/reset); "" for NULL.
inline std::string_view columnText(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return p ? std::string_view(p, static_cast<size_t>(sqlite3_column_bytes(s, i))) : std::string_view();
}

// Binds text that outlives the step (SQLITE_STATIC: SQLite does not copy it).
inline int bindText(sqlite3_stmt* s, int i, std::string_view v) {
  // A null pointer would bind SQL NULL; an empty string must stay an empty string.
  return sqlite3_bind_text64(s, i, v.data() ? v.data() : "", v.size(), SQLITE_STATIC, SQLITE_UTF8);
}

// "0x54534442" for messages.
std::string hex32(uint32_t v);

}  // namespace trainscope::core::tsdb
