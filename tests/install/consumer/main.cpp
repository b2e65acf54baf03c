// README.md "A short program", as a user would build it against the installed package.
#include "kiln/kiln.h"

int main() {
  kiln::Blueprint m("small");
  m.input(20, 20, 1)
   .conv(32, 3, 1, 1).bn().relu()      // fused into one CBR layer by the compiler
   .cbr(64, 3, 1, 1).maxpool(2, 2)
   .flatten().fc(10);

  kiln::CompileOptions c;               // cpu, fp32, batch 32, CBR fusion on, SGD
  c.batch = 64;
  kiln::TrainOptions t;
  t.epochs = 5;
  t.schedule.lr = 0.05f;

  kiln::Dataset train = kiln::load_dataset("data/digits", "idx", true);
  kiln::Dataset test = kiln::load_dataset("data/digits", "idx", false);
  kiln::Trainer trainer(m, c, t);
  trainer.fit(train, test);
  std::printf("test accuracy: %.4f\n", trainer.evaluate(test));
}
