// Result types for core. Core never throws across its public API for expected failures (bad
// files, bad input): it returns a Status or a Result<T> that names the problem for a person.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace trainscope::core {

enum class ErrorCode {
  Ok = 0,
  InvalidArgument,  // a caller passed something that cannot be right
  NotFound,         // a file or item does not exist
  Io,               // the OS refused a read or write (permissions, disk full, ...)
  NotSqlite,        // the file is not an SQLite database at all
  WrongMagic,       // an SQLite database, but not a Trainscope session (.tsdb)
  NewerSchema,      // a session written by a newer Trainscope than this build
  Truncated,        // the file is shorter than its own header says
  Corrupt,          // the file's structure is damaged
  MalformedJson,    // JSON that does not parse
  BadTrace,         // JSON that parses but is not a trace we understand
  Sqlite,           // any other SQLite failure (message carries SQLite's words)
};

const char* errorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool isOk() const { return code_ == ErrorCode::Ok; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "wrong-magic: foo.tsdb: not a Trainscope session (...)"
  std::string toString() const;

 private:
  ErrorCode code_ = ErrorCode::Ok;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const {
    static const Status kOk;
    return isOk() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace trainscope::core
