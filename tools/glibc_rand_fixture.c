/* Prints what microgpt.cu's host random draws give after srand(42): the first
 * raw rand() outputs, then rand_uniform() and rand_normal(0.08f) values written
 * the way microgpt.cu computes them, as exact hex floats. Builds the fixture
 * tests/fixtures/microgpt_glibc_rand.txt (see its first line for the command). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float rand_uniform(void) {
    return ((float)rand() + 1.0f) / ((float)RAND_MAX + 2.0f);
}

static float rand_normal(float stddev) {
    float u1 = rand_uniform();
    float u2 = rand_uniform();
    float mag = sqrtf(-2.0f * logf(u1));
    float phase = 2.0f * (float)M_PI * u2;
    return stddev * mag * cosf(phase);
}

int main(void) {
    srand(42);
    for (int i = 0; i < 40; ++i) printf("rand %d\n", rand());
    srand(42);
    for (int i = 0; i < 20; ++i) printf("uniform %a\n", rand_uniform());
    srand(42);
    for (int i = 0; i < 20; ++i) printf("normal %a\n", rand_normal(0.08f));
    srand(1);
    for (int i = 0; i < 5; ++i) printf("seed1 %d\n", rand());
    for (int i = 0; i < 5; ++i) printf("pow %a %a\n", powf(0.85f, (float)(i * 250 + 1)), powf(0.99f, (float)(i * 250 + 1)));
    return 0;
}
