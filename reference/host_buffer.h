// Host buffers of test and tuning data that are first written by several threads: allocated without being touched,
// so the pages are faulted in (and the memory filled) in parallel by the threads that write them.
#pragma once
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace kt {

/// std::allocator whose construct() without arguments default-initializes (for an arithmetic T: leaves the value
/// indeterminate) instead of value-initializing to zero; every other construct() is std::allocator's.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    std::allocator_traits<std::allocator<T>>::construct(static_cast<std::allocator<T>&>(*this), p,
                                                        std::forward<Args>(args)...);
  }
};

/// A vector whose resize(n) leaves the new elements unwritten: the caller writes every element before reading it.
template <class T>
using HostBuffer = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace kt
