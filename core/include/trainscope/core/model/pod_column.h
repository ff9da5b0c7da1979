// PodColumn<T>: a growable array of trivially copyable values backed by malloc/realloc.
//
// Why not std::vector: a vector grows by allocating a new block and copying, so a 10 M-event
// column is copied ~log(n) times and every copy faults in fresh pages. realloc on large blocks
// (glibc serves them with mmap) grows in place with mremap -- no copy -- which lets us use a
// small growth factor (1.25) and keep live slack low without paying for it in appends.
#pragma once

#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace trainscope::core {

template <typename T>
class PodColumn {
  static_assert(std::is_trivially_copyable_v<T>, "PodColumn holds plain values only");

 public:
  PodColumn() = default;
  PodColumn(const PodColumn& o) { assign(o); }
  PodColumn& operator=(const PodColumn& o) {
    if (this != &o) assign(o);
    return *this;
  }
  PodColumn(PodColumn&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  PodColumn& operator=(PodColumn&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~PodColumn() { std::free(data_); }

  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  operator std::span<const T>() const { return {data_, size_}; }  // NOLINT(google-explicit-constructor)

  // Appends without a capacity check: the caller reserved (see TrackEvents::append).
  void pushUnchecked(const T& v) { data_[size_++] = v; }
  void push_back(const T& v) {
    if (size_ == cap_) grow(size_ + 1);
    data_[size_++] = v;
  }
  void append(const T* p, size_t n) {
    if (n == 0) return;
    if (size_ + n > cap_) grow(size_ + n);
    std::memcpy(data_ + size_, p, n * sizeof(T));
    size_ += n;
  }
  // Ensures room for n elements in total. Blocks above glibc's largest mmap threshold (32 MiB)
  // grow in place, so 1.25x costs nothing; smaller ones may be copied, so they grow by 1.5x.
  void grow(size_t n) {
    if (n <= cap_) return;
    size_t cap = cap_ * sizeof(T) >= (size_t{32} << 20) ? cap_ + cap_ / 4 : cap_ + cap_ / 2;
    if (cap < n) cap = n;
    if (cap < 1024) cap = 1024;
    reallocTo(cap);
  }
  void reserve(size_t n) {
    if (n > cap_) reallocTo(n);
  }
  void shrink_to_fit() {
    if (size_ == cap_) return;
    if (size_ == 0) {
      std::free(std::exchange(data_, nullptr));
      cap_ = 0;
    } else {
      reallocTo(size_);
    }
  }
  void clear() { size_ = 0; }
  // Drops the elements from n on (n <= size()); capacity is kept.
  void truncate(size_t n) {
    if (n < size_) size_ = n;
  }

 private:
  void reallocTo(size_t cap) {
    void* p = std::realloc(data_, cap * sizeof(T));
    if (!p) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    cap_ = cap;
  }
  void assign(const PodColumn& o) {
    size_ = 0;
    reserve(o.size_);
    if (o.size_) std::memcpy(data_, o.data_, o.size_ * sizeof(T));
    size_ = o.size_;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t cap_ = 0;
};

}  // namespace trainscope::core
