#pragma once
// One user-facing setting, declared once: the field it lives in, its command-line flag, the
// environment variable that sets it where one exists, its type with its range or choices, its
// default (the owner struct's own), its help, whether a resumed run must match it and whether
// `kiln plan`, `kiln bench` and --json report it. Everything that mirrors settings (the CLI's
// flags and their checks, the KILN_* overrides, the checkpoint recipe, plan's header, the bench
// JSON, README's options table) is generated from these rows, so a new knob is a field and a row.
//
// A row reads and writes its field through an opaque owner (the struct it was declared on); rows
// declared on a part (OptimizerConfig, CudaOptions) are placed into a larger struct with
// `settings_within`, so each part declares its own rows where it is defined.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

enum class SettingType : uint8_t {
  Switch,    // a bool: "true"/"false" in recipes and JSON; 0|1 on the command line
  Count,     // a whole number in [lo, hi]
  Real,      // a float within its range
  Choice,    // one of a list of names ("sgd", "adamw", ...)
  Text,      // free text: a path, a layer name; empty means none
  Interval,  // two numbers MIN,MAX with MIN <= MAX, each within its range: "0.08,1"
};

// A closed or open bound of a Real's or a Count's range.
struct SettingRange {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;  // (lo, ...] or [..., hi)
  bool contains(double v) const;
  // "in [0, 1)", "> 0", ">= 1", "from 0 to 9999": the words the messages use (value_refusal's too).
  std::string text(SettingType type) const;
};
inline constexpr double kUnbounded = 1e300;
// The top of a 64-bit unsigned count's range (the seed): its flag reads 64 bits, not an int.
inline constexpr double kUint64Max = 18446744073709551615.0;

// What a row says about its setting besides its type (designated initializers keep rows readable).
struct SettingInfo {
  const char* key;               // the name recipes and JSON use: "momentum"
  const char* flag = nullptr;    // "--momentum"; nullptr: the library's only
  const char* alias = nullptr;   // another name of the flag: "-b", "--wd"
  const char* env = nullptr;     // "KILN_CUDNN_TUNE"; nullptr: no variable
  const char* help = "";         // what it does; a Switch's says what 1 and 0 do
  const char* member = "";       // the library's field, for messages: "CompileOptions::optimizer.momentum"
  // The advice a refusal ends with: "use e.g. --momentum 0.9, or 0 for plain SGD"; nullptr: none.
  const char* fix = nullptr;
  bool compared_on_resume = false;  // a resumed run must have the checkpoint's value
  bool reported = false;            // kiln plan's header, kiln bench's JSON
  // A Switch the command line gives as --x / --no-x (--hflip, --nesterov) rather than --x 0|1.
  bool flag_pair = false;
  // A Switch the command line gives as --x alone (--skip-bad): given is true, and there is no --no-x.
  bool flag_only = false;
  // A Count whose 0 lies outside its range and leaves the choice elsewhere (CpuOptions: to `env`
  // when set, else the machine): what 0 does. The library takes 0; the flag does not, its default
  // being what 0 leaves in place. nullptr: 0 is a value only where the range holds it.
  const char* zero = nullptr;
  // How `kiln plan`'s header names a reported row ("cbr fusion" for fuse_cbr); nullptr: its key.
  const char* plan_words = nullptr;
  // `kiln eval` and `kiln predict` take the checkpoint's value (its recipe's, under `key`) where
  // their command line does not give the flag: how evaluation images become samples (--image-size).
  bool eval_adopts = false;
  // What it takes, in words, where its type and range cannot say it ("-1 or >= 1", "auto, cpu, cuda
  // or cuda:N"): refusals and `kiln settings` use them; nullptr: the range's, or the type's.
  const char* takes = nullptr;
};

struct Setting {
  SettingInfo info;
  SettingType type = SettingType::Text;
  SettingRange range;                // Count, Real; an Interval's, for each of its two ends
  // Choice: the names, in the order help lists them. A Count: the only values it takes (--channels:
  // 1 or 3; empty: every one of its range). A Switch: the words it reads besides true and false
  // (an optional switch's "auto").
  std::vector<std::string> choices;
  // The value as text, in the one form recipes, JSON and README use ("0.9", "true", "sgd").
  std::function<std::string(const void* owner)> read;
  // Sets the value from text that `refusal` accepted (a Switch also takes 0|1).
  std::function<void(void* owner, const std::string& text)> write;
  // Whether the setting means anything for this owner's other values (momentum only for the
  // optimizers that have it); nullptr: always.
  std::function<bool(const void* owner)> applies;
  // The row whose value decides `applies` (the optimizer for momentum): a recipe difference of
  // this row is no difference of its own while that row's values differ.
  const char* decided_by = nullptr;
  // A refusal of its own, for text its type takes but the setting does not (a device spec, a GPU
  // list, HOST:PORT; --classes' 0): why not, in the user's terms, without the fix (`refusal` and the
  // flag's check add info.fix); empty: taken. nullptr: the type's checks are all. It must answer
  // any text (the command line asks before its number conversion): "" for what it does not judge.
  std::function<std::string(const std::string& text)> check;

  // Empty when `text` is a value this setting takes; else why not, in the user's terms:
  // "1.5 is out of range: it must be in [0, 1); use e.g. --momentum 0.9, or 0 for plain SGD".
  std::string refusal(const std::string& text) const;
  // The owner's value as text.
  template <class Owner>
  std::string text_of(const Owner& owner) const { return read(&owner); }
  // How to ask for `value` again: "--momentum 0.9 (CompileOptions::optimizer.momentum)", or
  // "0.9 as CompileOptions::optimizer.beta1" when there is no flag.
  std::string fix_for(const std::string& value) const;
};

// Floats as the shortest text that reads back as the same float ("0.9", "0.0005", "65536").
std::string setting_number_text(float x);
std::string setting_number_text(double x);

// An Interval's text, each end the shortest that reads back as the same double: "0.08,1",
// "0.75,1.3333333333333333"; and back, false for text that is not two numbers MIN,MAX.
std::string setting_interval_text(const std::array<double, 2>& v);
bool parse_setting_interval(const std::string& text, std::array<double, 2>& out);

// What an Interval takes, in the words messages and tables use: "MIN,MAX with MIN <= MAX, each in (0, 1]".
std::string setting_interval_words(const SettingRange& each);

// A row without its accessors yet (the typed builders below add them).
Setting new_setting(const SettingInfo& info, SettingType type, SettingRange range);

// Typed rows of a field of `Owner`.
template <class Owner>
Setting switch_setting(SettingInfo info, bool Owner::*field) {
  Setting s = new_setting(info, SettingType::Switch, {0, 1});
  s.read = [field](const void* o) { return std::string(static_cast<const Owner*>(o)->*field ? "true" : "false"); };
  s.write = [field](void* o, const std::string& t) { static_cast<Owner*>(o)->*field = t == "true" || t == "1"; };
  return s;
}

template <class Owner, class Int>
Setting count_setting(SettingInfo info, Int Owner::*field, SettingRange range) {
  Setting s = new_setting(info, SettingType::Count, range);
  s.read = [field](const void* o) { return std::to_string(static_cast<const Owner*>(o)->*field); };
  s.write = [field](void* o, const std::string& t) {
    // An unsigned 64-bit count (the seed) may pass what a long long holds.
    if constexpr (std::is_unsigned_v<Int>) static_cast<Owner*>(o)->*field = static_cast<Int>(std::stoull(t));
    else static_cast<Owner*>(o)->*field = static_cast<Int>(std::stoll(t));
  };
  return s;
}

// A whole number that takes only `values` (--channels: 1 or 3), its range spanning them.
template <class Owner>
Setting count_choice_setting(SettingInfo info, int Owner::*field, const std::vector<int>& values) {
  int lo = values.front(), hi = values.front();
  for (int v : values) lo = v < lo ? v : lo, hi = v > hi ? v : hi;
  Setting s = count_setting<Owner>(info, field, {double(lo), double(hi)});
  for (int v : values) s.choices.push_back(std::to_string(v));
  return s;
}

// A Switch that may be left unset: "auto", what that does being the owner's to decide (--hflip: on
// for the imagenet transform). Its flag is --x / --no-x (info.flag_pair); "auto" gives neither.
template <class Owner>
Setting optional_switch_setting(SettingInfo info, std::optional<bool> Owner::*field) {
  Setting s = new_setting(info, SettingType::Switch, {0, 1});
  s.choices = {"auto"};
  s.read = [field](const void* o) {
    const std::optional<bool>& v = static_cast<const Owner*>(o)->*field;
    return std::string(!v ? "auto" : *v ? "true" : "false");
  };
  s.write = [field](void* o, const std::string& t) {
    std::optional<bool>& v = static_cast<Owner*>(o)->*field;
    if (t == "auto") v.reset();
    else v = t == "true" || t == "1";
  };
  return s;
}

// Two numbers MIN,MAX (--crop-scale 0.08,1), each within `each`.
template <class Owner>
Setting interval_setting(SettingInfo info, std::array<double, 2> Owner::*field, SettingRange each) {
  Setting s = new_setting(info, SettingType::Interval, each);
  s.read = [field](const void* o) { return setting_interval_text(static_cast<const Owner*>(o)->*field); };
  s.write = [field](void* o, const std::string& t) { parse_setting_interval(t, static_cast<Owner*>(o)->*field); };
  return s;
}

// A float or a double field (bench's peaks keep the exact double given); its text the shortest
// that reads back as the same value of the field's type.
template <class Owner, class Real>
Setting real_setting(SettingInfo info, Real Owner::*field, SettingRange range) {
  static_assert(std::is_same_v<Real, float> || std::is_same_v<Real, double>);
  Setting s = new_setting(info, SettingType::Real, range);
  s.read = [field](const void* o) { return setting_number_text(static_cast<const Owner*>(o)->*field); };
  s.write = [field](void* o, const std::string& t) {
    if constexpr (std::is_same_v<Real, float>) static_cast<Owner*>(o)->*field = std::stof(t);
    else static_cast<Owner*>(o)->*field = std::stod(t);
  };
  return s;
}

template <class Owner>
Setting text_setting(SettingInfo info, std::string Owner::*field) {
  Setting s = new_setting(info, SettingType::Text, {});
  s.read = [field](const void* o) { return static_cast<const Owner*>(o)->*field; };
  s.write = [field](void* o, const std::string& t) { static_cast<Owner*>(o)->*field = t; };
  return s;
}

// An enumerated field: `names` pairs each value with its name.
template <class Owner, class Enum>
Setting choice_setting(SettingInfo info, Enum Owner::*field, std::vector<std::pair<std::string, Enum>> names) {
  Setting s = new_setting(info, SettingType::Choice, {});
  for (const auto& [name, value] : names) s.choices.push_back(name);
  s.read = [field, names](const void* o) {
    for (const auto& [name, value] : names)
      if (static_cast<const Owner*>(o)->*field == value) return name;
    return std::string("?");
  };
  s.write = [field, names](void* o, const std::string& t) {
    for (const auto& [name, value] : names)
      if (name == t) static_cast<Owner*>(o)->*field = value;
  };
  return s;
}

// A field that holds one of `choices` by name (a dataset format, a transform), checked as a Choice.
template <class Owner>
Setting text_choice_setting(SettingInfo info, std::string Owner::*field, std::vector<std::string> choices) {
  Setting s = text_setting<Owner>(info, field);
  s.type = SettingType::Choice;
  s.choices = std::move(choices);
  return s;
}

// `rows`, declared on `Part`, as rows of `Whole` whose member `part` holds it.
template <class Whole, class Part>
std::vector<Setting> settings_within(std::vector<Setting> rows, Part Whole::*part) {
  for (Setting& s : rows) {
    auto read = s.read;
    auto write = s.write;
    s.read = [read, part](const void* o) { return read(&(static_cast<const Whole*>(o)->*part)); };
    s.write = [write, part](void* o, const std::string& t) { write(&(static_cast<Whole*>(o)->*part), t); };
    if (auto applies = s.applies)
      s.applies = [applies, part](const void* o) { return applies(&(static_cast<const Whole*>(o)->*part)); };
  }
  return rows;
}

// The row of `key` in `rows`, or nullptr.
const Setting* find_setting(const std::vector<Setting>& rows, const std::string& key);

// A Switch's or a Count's value as a number (a Switch: 0 or 1), and back (the environment's
// overrides, the checks of the library's fields); an internal kiln::Error for other types.
int setting_number(const Setting& row, const void* owner);
void set_setting_number(const Setting& row, void* owner, int value);

}  // namespace kiln
