from kernelcraft.cli import main

main()
