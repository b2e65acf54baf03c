#pragma once
// Training loop: batches from a loader -> copy in -> forward (+loss) -> backward -> fused
// optimizer update, with a learning-rate schedule, evaluation and checkpoints.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/checkpoint.h"
#include "kiln/data.h"
#include "kiln/data_parallel.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/torch_weights.h"
#include "kiln/options.h"
#include "kiln/schedule.h"

namespace kiln {

struct TrainOptions {
  int epochs = 10;
  LrSchedule schedule;
  uint64_t seed = 1;
  Augment augment;
  int workers = 2;
  // Who decodes training images on a CUDA run (image folders and packs): the loader's CPU threads,
  // or nvJPEG on the GPU with those threads helping (see DecodeDevice). Evaluation always decodes
  // on the CPU, so its samples stay torchvision's pixel for pixel.
  DecodeDevice decode = DecodeDevice::Auto;
  // Written atomically after every epoch when non-empty. The Trainer's constructor checks that
  // its folder exists and is writable and locks it ("<checkpoint>.lock", CheckpointLock) for the
  // Trainer's lifetime, so a second writer of the same checkpoint fails at once.
  std::string checkpoint;
  // Continue from `checkpoint` if it exists (needs `checkpoint`); if it does not, the run starts
  // fresh (Trainer::resumed says which). The checkpoint must have been written with the same
  // recipe (Trainer::recipe); only `epochs` may differ.
  bool resume = false;
  // Replace an existing `checkpoint` with this fresh run's (after its first epoch). Without it,
  // an existing file at `checkpoint` is refused unless `resume` is set: the Trainer's constructor
  // throws before anything is compiled (check_checkpoint_target), so a forgotten `resume` never
  // destroys an earlier run. Excludes `resume`.
  bool overwrite = false;
  // The steps run without the host reading anything back: the loss and hit totals stay on the
  // device (ACCUMULATE_TOTALS). They are read after an epoch's first and last steps and, in
  // between, once this many seconds have passed since the last read: that is when on_step is
  // called and when a non-finite loss is noticed (training then stops with the step named).
  // 0 reads after every step. >= 0.
  double report_seconds = 0.5;
  // More settings a checkpoint must share to be resumed, appended to recipe(): how the data's
  // files become samples (kiln train fills it for image folders and packs).
  std::vector<std::pair<std::string, std::string>> data_recipe;
  // Asks a running fit to stop (nullptr: never). Setting it is a lock-free atomic store, so a
  // signal handler may do it. fit looks at it before each training step: it finishes the step
  // under way, then throws kiln::Stopped. A stop never writes a checkpoint of a partial epoch:
  // checkpoints hold whole epochs, and a resumed run continues from the last one written. A stop
  // seen after an epoch's last step lets that epoch finish (evaluation, checkpoint) and stops
  // before the next one's first step; after the last epoch it changes nothing. Owned by the caller
  // and read, never reset, by fit.
  const std::atomic<bool>* stop = nullptr;
  // Data parallel (CompileOptions::data_parallel): a rank that sees no training progress for this
  // many seconds stops (its ProcessGroup's watchdog), so a peer that hangs never holds the run
  // forever. 0: no watchdog. Applies from the first training step; preparing is not watched.
  double rank_timeout = 600;
};
static_assert(std::atomic<bool>::is_always_lock_free, "TrainOptions::stop must be settable from a signal handler");

struct StepReport {
  int epoch = 0;
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  double loss = 0, images_per_second = 0, eta_seconds = 0;
  // The share of the epoch's time so far that the training thread spent waiting for batches
  // from the loader (0: the loader kept ahead; near 1: data loading is the limit).
  double data_wait_share = 0;
};

struct EpochReport {
  int epoch = 0;
  double train_loss = 0, train_accuracy = 0, test_accuracy = 0;  // accuracies: top-1
  double train_top5_accuracy = 0, test_top5_accuracy = 0;
  double seconds = 0, images_per_second = 0;  // the training steps alone
  double data_wait_seconds = 0;  // of `seconds`, the time spent waiting for the loader's batches
  double lr = 0;                  // the learning rate of the epoch's first step
  double loss_scale = 0;          // dynamic loss scaling (fp16): the scale after the epoch; 0 without
  std::string decoder;            // who decoded the images so far (BatchStream::describe), if it says
  // The rest of the epoch: the scan of the state for non-finite values, the evaluation on the
  // test set and writing the checkpoint.
  double check_seconds = 0, eval_seconds = 0, checkpoint_seconds = 0;
  // Not empty when the evaluation on the test set failed (a file that cannot be decoded): the
  // epoch's checkpoint was written before the evaluation and this report still goes to on_epoch,
  // with no test accuracy; fit then throws an Error holding this message and what was kept.
  std::string eval_error;
};

// What fit throws when TrainOptions::stop asked it to stop. The message says where it stopped and
// what the checkpoint holds; a stop is not a failure, so callers that care catch it before Error.
class Stopped : public Error {
 public:
  Stopped(std::string message, int epoch, int epochs, int64_t step, int64_t steps_per_epoch, std::string checkpoint,
          int checkpoint_epochs)
      : Error(std::move(message)), epoch(epoch), epochs(epochs), step(step), steps_per_epoch(steps_per_epoch),
        checkpoint(std::move(checkpoint)), checkpoint_epochs(checkpoint_epochs) {}
  int epoch;                // the epoch stopped in, from 0 (as StepReport::epoch); of `epochs`
  int epochs;
  int64_t step;             // its steps done (0: stopped before its first), of `steps_per_epoch`
  int64_t steps_per_epoch;
  std::string checkpoint;   // TrainOptions::checkpoint ("" when none was set)
  int checkpoint_epochs;    // the epochs done in `checkpoint` as this run wrote or resumed it; 0: none
};

// The rule above, on its own (the Trainer's constructor applies it after taking the lock; kiln
// train applies it before loading any data too): throws kiln::Error naming the file and the
// fixes (resume, overwrite, another path) when `checkpoint` exists and neither `resume` nor
// `overwrite` is set.
void check_checkpoint_target(const TrainOptions& train);

class Trainer {
 public:
  Trainer(const Blueprint& blueprint, const CompileOptions& options, TrainOptions train);
  ~Trainer();

  Executable& executable() { return *exe_; }

  // Trains for the configured epochs (from the resumed epoch, if any), evaluating on `test`
  // after each epoch. Callbacks may be empty; on_step is called when the totals are read
  // (TrainOptions::report_seconds). A step whose loss is not finite (NaN, inf), noticed at the
  // next read, or an epoch that leaves a non-finite value in the parameters, buffers or optimizer
  // state, stops training with a kiln::Error naming the epoch and step and the last good
  // checkpoint (which is left as it was): no checkpoint holding a non-finite value is ever
  // written. TrainOptions::stop ends it early with kiln::Stopped: nothing of the partial epoch is
  // saved, and the Trainer's own state then holds it, so continue with a new Trainer resuming the
  // checkpoint (this one's lock must go first: destroy it).
  // The Dataset form augments the training set with TrainOptions::augment.
  std::vector<EpochReport> fit(const Dataset& train, const Dataset& test,
                               const std::function<void(const StepReport&)>& on_step = {},
                               const std::function<void(const EpochReport&)>& on_epoch = {});
  // The same over sources (image folders, packed files): they bring their own augmentation.
  // Normalization comes from train.channel_stats() in a fresh run, from the checkpoint when
  // resumed. An empty `test` skips evaluation (test_accuracy 0, which then measures nothing: kiln
  // train prints no accuracy). Before the first step, a kiln::Error refuses a `test` whose images
  // differ in size from `train`'s or with more classes than the model, and a TrainOptions::augment
  // pad_crop not smaller than the training images' side. The class names of `train`, when
  // it has them, are written into checkpoints; a resumed checkpoint with other names is refused.
  std::vector<EpochReport> fit(const SampleSource& train, const SampleSource& test,
                               const std::function<void(const StepReport&)>& on_step = {},
                               const std::function<void(const EpochReport&)>& on_epoch = {});
  // Top-1 accuracy in eval mode (running BN statistics, no dropout).
  double evaluate(const Dataset& data);
  double evaluate(const SampleSource& data);
  struct Accuracy {
    double top1 = 0, top5 = 0;  // a row counts for top-5 when fewer than 5 logits outrank its label
  };
  Accuracy evaluate_accuracy(const SampleSource& data);
  // Eval mode over every sample of `data`, in order, one batch at a time: `on_batch` gets the
  // index of the batch's first sample, its real rows (a last partial batch's padding left out),
  // their logits (rows x classes, row-major, widened to double from the program's dtype) and
  // labels. The logits are read back after every batch (a wait on the GPU), which
  // evaluate_accuracy avoids: this is for reports that need each row (evaluate_in_detail) and
  // for prediction.
  using LogitsBatch =
      std::function<void(int64_t first, int64_t rows, const double* logits, const int32_t* labels)>;
  void infer(const SampleSource& data, const LogitsBatch& on_batch);
  // What `kiln eval` reports: accuracies as evaluate_accuracy counts them (same rank rule, so
  // the same values), the mean softmax cross-entropy of the eval-mode logits (no label
  // smoothing, summed in double in sample order), and per class (by label, one entry per model
  // output) the samples and those whose top-1 prediction is right.
  struct Evaluation {
    int64_t images = 0;
    double loss = 0, top1 = 0, top5 = 0;
    std::vector<int64_t> class_correct, class_count;
  };
  Evaluation evaluate_in_detail(const SampleSource& data);
  // One training step on an already normalized NHWC batch; returns the loss. A non-finite loss
  // is a kiln::Error (the step's update has been applied by then).
  double step(const Batch& batch, float lr);

  // Checkpoint: parameters and buffers by layer-graph tensor name, optimizer state, progress,
  // and the recipe (metadata "recipe.<key>") with "kiln_version" and the planned "epochs".
  // Saving refuses state holding a non-finite value (kiln::Error naming the tensor; an existing
  // file is left as it was). Loading restores everything or nothing: it refuses a checkpoint of
  // another recipe (listing each difference; the epoch count is not part of the recipe), of
  // another optimizer, or holding a non-finite value (naming the tensor).
  void save_checkpoint(const std::string& path, int epochs_done);
  int load_checkpoint(const std::string& path);  // returns the number of epochs done
  // For evaluation and prediction: the parameters, buffers, normalization and class names of a
  // checkpoint, whatever recipe trained it (its optimizer state is left out). The same checks of
  // every tensor as load_checkpoint; nothing is restored unless all pass.
  void load_weights(const std::string& path);
  // For evaluation and prediction of weights that come from elsewhere than a checkpoint (an
  // imported model file, its weights written through executable()): the normalization its inputs
  // take and its class names (empty: unnamed), which load_weights takes from a checkpoint.
  void set_inference_inputs(ChannelStats normalization, std::vector<std::string> class_names);
  // Starts from a PyTorch state_dict saved as safetensors (kiln/torch_weights.h says how names and
  // layouts map); refused, loading nothing, when it does not fit the model.
  TorchWeightsLoaded load_torch_weights(const std::string& path, const TorchWeightsOptions& options = {});

  // What a checkpoint must share to be resumed by this trainer, in a fixed order: model, input,
  // classes, batch, precision, optimizer and its hyper-parameters, schedule and its settings,
  // label_smoothing, seed, crop_pad, hflip, then TrainOptions::data_recipe. Values as the
  // checkpoint's metadata holds them.
  std::vector<std::pair<std::string, std::string>> recipe() const;

  const ChannelStats& normalization() const { return norm_; }
  // The class names of the data trained on, or of the resumed checkpoint (empty when unnamed).
  const std::vector<std::string>& class_names() const { return class_names_; }
  // Whether the constructor resumed from TrainOptions::checkpoint (resume set and the file there),
  // and the epochs that checkpoint had done (0 when not resumed).
  bool resumed() const { return resumed_; }
  int resumed_epochs() const { return resumed_epochs_; }
  // How many ranks trained the resumed checkpoint (1 for one GPU, and for checkpoints that do not
  // say); this run's count is CompileOptions::data_parallel's. Resuming on another count is allowed:
  // the global batch changes, and the step count is re-based on the epochs done.
  int resumed_ranks() const { return resumed_ranks_; }
  int ranks() const;  // this run's ranks (1 when training alone)
  // The temporary files of interrupted writes of TrainOptions::checkpoint that the constructor
  // removed (CheckpointLock::removed_temp_files); the library prints nothing, kiln train lists them.
  std::vector<std::string> removed_temp_files() const;

 private:
  void check_dataset(const SampleSource& data, const char* which) const;
  void copy_in(const Batch& batch);
  // Whether batches cross to the device as uint8 pixels, normalized there (a GPU program with an
  // F32 input): a quarter of the bytes through PCIe and the host's memory.
  bool pixels_to_device() const;
  // The training loader opt_.decode asks for (batches of `batch`, shuffled, the last partial one
  // dropped).
  std::unique_ptr<BatchStream> training_batches(const SampleSource& train, int batch) const;
  // Copies the batch in and enqueues one training step; reads nothing back.
  void enqueue_step(const Batch& batch, float lr);
  // The running totals (Program::train_totals / inference_totals): reset to none, and read back.
  void reset_totals(int totals_id);
  std::vector<double> read_totals(int totals_id);
  // Parameters, buffers and optimizer state as they are checkpointed.
  std::vector<NamedTensor> state();
  void save_state(const std::string& path, int epochs_done, const std::vector<NamedTensor>& tensors);
  // Throws listing each difference between recipe() and the one a checkpoint's metadata records.
  void check_recipe(const std::string& path, const std::map<std::string, std::string>& metadata) const;
  int restore(const std::string& path, bool weights_only);
  // Where the last good state is, for the messages of a diverged run.
  std::string last_good_checkpoint() const;
  // fit's error after epoch `epoch` when its evaluation failed (EpochReport::eval_error).
  std::string evaluation_failed_text(const EpochReport& r, int epoch) const;
  TrainOptions opt_;  // checked, and its checkpoint locked, before anything is compiled
  std::unique_ptr<CheckpointLock> lock_;
  std::string model_name_;
  std::unique_ptr<Executable> exe_;
  ChannelStats norm_;
  std::vector<std::string> class_names_;
  int64_t global_step_ = 0;
  int epochs_done_ = 0;
  int saved_epochs_ = 0;  // epochs in the file at opt_.checkpoint written or resumed by this trainer
  bool resumed_ = false;
  int resumed_epochs_ = 0;
  int resumed_ranks_ = 1;
  // Data parallel: the group (nullptr alone). Ranks other than 0 write no checkpoint and take no lock.
  ProcessGroup* group_ = nullptr;
  bool writes_checkpoints() const;
  // The training totals of every rank added up (the first bad step: the earliest any rank saw), and
  // whether any rank was asked to stop; alone, this rank's.
  std::vector<double> read_training_totals(bool& stop_agreed);
};

}  // namespace kiln
