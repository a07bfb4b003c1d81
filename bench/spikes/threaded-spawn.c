/* Spike for docs/benchmarks.md, "Towards a 50 ms move" (not built by cargo or CI). */
/* Spike: rank 0 spawns a standby over MPI_COMM_SELF from a second thread while every rank
   iterates (~1 ms compute + allreduce on MPI_COMM_WORLD). Longest iteration before and
   during the spawn. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static char *prog; static volatile int done=0; static double spawn_ms;
static MPI_Comm sb;
static void *spawner(void*_){ double t0=now(); char*args[]={"standby",NULL};
  MPI_Comm_spawn(prog,args,1,MPI_INFO_NULL,0,MPI_COMM_SELF,&sb,MPI_ERRCODES_IGNORE);
  spawn_ms=(now()-t0)*1e3; __atomic_store_n(&done,1,__ATOMIC_SEQ_CST); return NULL;}
static void work(double ms){ double t=now(); volatile double x=0; while((now()-t)*1e3<ms) x+=1; }
int main(int argc,char**argv){
  int prov; MPI_Init_thread(&argc,&argv,MPI_THREAD_MULTIPLE,&prov);
  MPI_Comm parent; MPI_Comm_get_parent(&parent);
  if(parent!=MPI_COMM_NULL){ int x; MPI_Recv(&x,1,MPI_INT,0,0,parent,MPI_STATUS_IGNORE); MPI_Comm_disconnect(&parent); MPI_Finalize(); return 0; }
  if(prov<MPI_THREAD_MULTIPLE){ fprintf(stderr,"no THREAD_MULTIPLE: %d\n",prov); }
  prog=argv[0];
  int rank; MPI_Comm_rank(MPI_COMM_WORLD,&rank);
  pthread_t th; double before=0,during=0; int it_during=0, started=0;
  for(int it=0; it<600; it++){
    double t0=now();
    if(it==200 && rank==0){ pthread_create(&th,NULL,spawner,NULL); started=1; }
    work(1.0);
    double x=1,y; MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);
    double d=(now()-t0)*1e3;
    if(it<200){ if(d>before) before=d; }
    else if(it<400){ if(d>during) during=d; }
  }
  if(rank==0){ pthread_join(th,NULL); int x=0; MPI_Send(&x,1,MPI_INT,0,0,sb); MPI_Comm_disconnect(&sb);
    printf("spawn in thread %.1f ms; longest iteration before %.1f ms, during/after %.1f ms\n",spawn_ms,before,during); }
  double m; MPI_Reduce(&during,&m,1,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD);
  if(rank==0) printf("  longest over ranks after it 200: %.1f ms\n",m);
  MPI_Finalize(); return 0; }
