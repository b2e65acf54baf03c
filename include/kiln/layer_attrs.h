#pragma once
// A layer's attributes: one struct of the layer kind's own (kiln::ConvAttrs, kiln::PoolAttrs, ...,
// kiln/layer_kind_attrs.h; a fused kind's in its family's folder), held by value in one small box,
// so the graph, the DSL and the passes carry any kind's attributes without a list of the kinds.
// Readers ask for the struct they expect (`layer.attrs.get<ConvAttrs>(where)`, or kiln::attrs_of
// in kiln/layer_graph.h); asking for another is a kiln::Error naming the layer, what it holds and
// what was asked for. Part of the IR.
//
// An attribute struct is a plain aggregate with
//   static constexpr const char* kName;           // "ConvAttrs": what the errors call it
//   void check(const std::string& where) const;   // optional: refuses values that cannot work,
//                                                 // naming `where` ("conv 'stem'") and the fix
//   auto parts() const;                           // optional: std::tie of the structs it is made
//                                                 // of, which get<> also finds (a fused layer's
//                                                 // ConvAttrs inside its ConvBnAttrs)
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace kiln {

// Written without C++20's concepts: CUDA sources include this header (through kiln/program.h) and
// nvcc compiles them as C++17.
namespace layer_attrs_detail {
template <class T, class = void>
struct has_parts : std::false_type {};
template <class T>
struct has_parts<T, std::void_t<decltype(std::declval<const T&>().parts())>> : std::true_type {};
template <class T, class = void>
struct has_check : std::false_type {};
template <class T>
struct has_check<T, std::void_t<decltype(std::declval<const T&>().check(std::declval<const std::string&>()))>>
    : std::true_type {};
template <class T, class = void>
struct is_attribute_struct : std::false_type {};
template <class T>
struct is_attribute_struct<T, std::enable_if_t<std::is_convertible_v<decltype(T::kName), const char*>>>
    : std::is_copy_constructible<T> {};
}  // namespace layer_attrs_detail

class LayerAttrs {
 public:
  LayerAttrs() = default;  // no attributes (ReLU, Flatten, Add, ...)
  template <class T, class = std::enable_if_t<layer_attrs_detail::is_attribute_struct<T>::value>>
  LayerAttrs(T value) : held_(std::make_shared<Held<T>>(std::move(value))) {}  // NOLINT: implicit by design

  bool empty() const { return !held_; }
  // The held struct's name ("ConvAttrs"), "no attributes" when empty.
  const char* type_name() const { return held_ ? held_->name() : "no attributes"; }

  // The held struct if it is a T or holds one among its parts(), else nullptr.
  template <class T>
  const T* find() const {
    return held_ ? static_cast<const T*>(held_->part(typeid(T))) : nullptr;
  }
  // The held T; a kiln::Error naming `where` (the layer: "conv 'stem'"), the held struct and T
  // otherwise.
  template <class T>
  const T& get(std::string_view where) const {
    if (const T* t = find<T>()) return *t;
    wrong_struct(where, T::kName);
  }
  // The same, to change (the compiler's passes): the struct is copied first when another
  // LayerAttrs shares it, so copies never see each other's changes.
  template <class T>
  T& edit(std::string_view where) {
    get<T>(where);
    if (held_.use_count() > 1) held_ = held_->clone();
    // The box was made non-const (make_shared of Held<T>), so writing through it is well defined.
    return const_cast<T&>(*static_cast<const T*>(held_->part(typeid(T))));
  }

  // The held struct's check(where), if it has one: a kiln::Error naming `where` and the fix for a
  // value that cannot work. Called once for every layer as it enters a graph (compile's expand).
  void check(const std::string& where) const {
    if (held_) held_->check(where);
  }

 private:
  struct Box {
    virtual ~Box() = default;
    virtual const char* name() const = 0;
    virtual const void* part(const std::type_info& type) const = 0;
    virtual std::shared_ptr<const Box> clone() const = 0;
    virtual void check(const std::string& where) const = 0;
  };
  template <class T>
  struct Held final : Box {
    explicit Held(T v) : value(std::move(v)) {}
    const char* name() const override { return T::kName; }
    const void* part(const std::type_info& type) const override {
      if (type == typeid(T)) return &value;
      const void* found = nullptr;
      if constexpr (layer_attrs_detail::has_parts<T>::value)
        std::apply([&](const auto&... p) { ((found = found ? found : (type == typeid(p) ? &p : nullptr)), ...); },
                   value.parts());
      return found;
    }
    std::shared_ptr<const Box> clone() const override { return std::make_shared<Held<T>>(value); }
    void check(const std::string& where) const override {
      if constexpr (layer_attrs_detail::has_check<T>::value) value.check(where);
    }
    T value;
  };

  [[noreturn]] void wrong_struct(std::string_view where, const char* wanted) const;

  std::shared_ptr<const Box> held_;
};

}  // namespace kiln
